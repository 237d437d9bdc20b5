#pragma once
// One cache per layer of a model, managed together: snapshots, restores,
// merges and splits act on every layer at once and fail atomically (all
// layers change, or none does).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/snapshot.h"

namespace ringkv {

// One snapshot per layer (a layer may have none).
class LayerSnapshot {
 public:
  LayerSnapshot() = default;
  // One entry per layer (null: none for that layer), e.g. imported from a file.
  explicit LayerSnapshot(std::vector<std::unique_ptr<Snapshot>> layers)
      : layers_(std::move(layers)) {}

  std::size_t Layers() const noexcept { return layers_.size(); }
  const Snapshot* Layer(std::size_t layer) const { return layers_.at(layer).get(); }
  std::size_t Size() const noexcept;  // bytes, summed over the layers
  // Hands one layer's snapshot over, leaving none there (the prompt cache moves
  // sliding-window snapshots between trie nodes); throws std::out_of_range.
  std::unique_ptr<Snapshot> Release(std::size_t layer) { return std::move(layers_.at(layer)); }
  void Reset(std::size_t layer, std::unique_ptr<Snapshot> snapshot) {
    layers_.at(layer) = std::move(snapshot);
  }

 private:
  friend class LayerCaches;
  std::vector<std::unique_ptr<Snapshot>> layers_;
};

class LayerCaches {
 public:
  using Layer = std::variant<KVCache, RotatingKVCache>;

  // Gemma-style: layer i is global (a KVCache) when (i + 1) % global_every == 0,
  // else a RotatingKVCache(window). Throws ringkv::Error for layers < 1,
  // global_every < 1 or window < 1.
  static LayerCaches Interleaved(int layers, int global_every, int window,
                                 std::int64_t block_tokens = KVCache::kDefaultBlockTokens);
  explicit LayerCaches(std::vector<Layer> layers);

  std::size_t Size() const noexcept { return layers_.size(); }
  // Throws ringkv::Error when layer >= Size().
  AttentionCache& operator[](std::size_t layer);
  const AttentionCache& operator[](std::size_t layer) const;
  // Every layer, for BeginSpeculation.
  std::vector<AttentionCache*> Caches();
  std::vector<int> Offsets() const;

  // Every layer's Snapshot(from_offset); null when no layer has anything.
  std::unique_ptr<LayerSnapshot> Snapshot(int from_offset) const;
  // Restores every layer to `target` (null: live rewind), or none: returns
  // false, with nothing changed, when any layer cannot.
  bool Restore(const LayerSnapshot* snapshot, int target);
  // Layer by layer; validated for every layer before anything is combined.
  std::unique_ptr<LayerSnapshot> Merge(std::unique_ptr<LayerSnapshot> parent,
                                       std::unique_ptr<LayerSnapshot> child) const;
  std::pair<std::unique_ptr<LayerSnapshot>, std::unique_ptr<LayerSnapshot>> Split(
      std::unique_ptr<LayerSnapshot> snapshot, int at) const;
  void Free() noexcept;

 private:
  void CheckLayers(const char* function, const LayerSnapshot* snapshot) const;

  std::vector<Layer> layers_;
};

}  // namespace ringkv
