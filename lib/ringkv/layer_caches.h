#pragma once
// One cache per layer of a model, managed together: snapshots, restores,
// merges and splits act on every layer at once and fail atomically (all
// layers change, or none does).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/snapshot.h"

namespace ringkv {

namespace detail {
class LayerSnapshotAccess;
}

// One snapshot per layer (a layer may have none).
class LayerSnapshot {
 public:
  LayerSnapshot() = default;
  // One entry per layer (null: none for that layer), e.g. imported from a file.
  explicit LayerSnapshot(std::vector<std::unique_ptr<Snapshot>> layers)
      : layers_(std::move(layers)) {}

  std::size_t Layers() const noexcept { return layers_.size(); }
  // Throws ringkv::Error when layer >= Layers().
  const Snapshot* Layer(std::size_t layer) const;
  std::size_t Size() const noexcept;  // bytes, summed over the layers

 private:
  friend class LayerCaches;
  friend class detail::LayerSnapshotAccess;  // the prompt cache's per-layer moves
  void CheckIndex(const char* function, std::size_t layer) const;

  std::vector<std::unique_ptr<Snapshot>> layers_;
};

// The one-offset rule: the layers of one model hold the same tokens, so every
// operation that uses them together (Offset, Snapshot, a speculation) requires
// them to be at one offset and throws ringkv::Error naming the offsets per layer
// when they are not (e.g. after a forward that updated only some layers).
// Offsets() shows them; Restore (which ends with every layer at its target, or
// changes nothing) and Free are the ways back.
class LayerCaches {
 public:
  using Layer = std::variant<KVCache, RotatingKVCache>;

  // Gemma-style: layer i is global (a KVCache) when (i + 1) % global_every == 0,
  // else a RotatingKVCache(window); every layer gets block_tokens and
  // storage_dtype (int8 / int4 included: both K and V in it). Throws
  // ringkv::Error for layers < 1, global_every < 1 or window < 1, and what the
  // caches' constructors throw.
  static LayerCaches Interleaved(int layers, int global_every, int window,
                                 std::int64_t block_tokens = KVCache::kDefaultBlockTokens,
                                 std::optional<DType> storage_dtype = std::nullopt);
  // The same with K and V in their own storage dtypes, e.g. {kI8, kI4}.
  static LayerCaches Interleaved(int layers, int global_every, int window,
                                 std::int64_t block_tokens, KvStorage storage);
  explicit LayerCaches(std::vector<Layer> layers);

  std::size_t Size() const noexcept { return layers_.size(); }
  // Throws ringkv::Error when layer >= Size().
  AttentionCache& operator[](std::size_t layer);
  const AttentionCache& operator[](std::size_t layer) const;
  // Every layer, for BeginSpeculation.
  std::vector<AttentionCache*> Caches();
  // Each layer's offset, whatever they are (a diagnostic).
  std::vector<int> Offsets() const;
  // The layers' common offset (0 without layers); ringkv::Error when they differ.
  int Offset() const;

  // Every layer's Snapshot(from_offset); null when no layer has anything.
  // ringkv::Error when the layers are at different offsets.
  std::unique_ptr<LayerSnapshot> Snapshot(int from_offset) const;
  // Restores every layer to `target` (null: live rewind), or none: returns
  // false, with nothing changed, when any layer cannot. Accepts layers at
  // different offsets (on success they are all at `target`).
  bool Restore(const LayerSnapshot* snapshot, int target);
  // Cache::CanRewind / Rewind / Trim over every layer: all layers or none.
  //   CanRewind(target): whether every layer can (true without layers).
  //   Rewind(target):    Restore(nullptr, target); like Restore, accepts layers
  //                      at different offsets.
  //   Trim(n):           removes the last min(n, Offset()) tokens from every layer
  //                      and returns that count, or returns 0 with nothing changed
  //                      when any layer cannot rewind; requires one offset (as
  //                      Offset()).
  // A negative target or n throws ringkv::Error, changing nothing.
  bool CanRewind(int target) const;
  bool Rewind(int target);
  int Trim(int n);
  // Layer by layer (Cache::Merge / Split). Everything is validated before
  // anything is combined: the layer count and kinds, each snapshot's layers
  // ending at one offset, adjacency. Ownership as in Cache::Merge: consumed on
  // success, untouched when it throws.
  std::unique_ptr<LayerSnapshot> Merge(std::unique_ptr<LayerSnapshot>&& parent,
                                       std::unique_ptr<LayerSnapshot>&& child) const;
  std::pair<std::unique_ptr<LayerSnapshot>, std::unique_ptr<LayerSnapshot>> Split(
      std::unique_ptr<LayerSnapshot>&& snapshot, int at) const;
  void Free() noexcept;

 private:
  void CheckLayers(const char* function, const LayerSnapshot* snapshot) const;
  void CheckOneOffset(const char* function) const;
  // Every layer's snapshot of the layer's kind (and window), ending at one offset.
  void CheckSnapshot(const char* function, const char* role, const LayerSnapshot& snapshot) const;

  std::vector<Layer> layers_;
};

}  // namespace ringkv
