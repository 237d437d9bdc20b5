#pragma once
// The model's caches: ringkv::LayerCaches built from the config's layer pattern
// (a KVCache on global layers, a RotatingKVCache(window) on sliding ones), plus
// what the model and the demo need on top: the per-layer pointers Forward takes,
// bytes per layer kind, and copy-on-write forks for a draft run.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "model_config.h"
#include "ringkv/cache.h"
#include "ringkv/layer_caches.h"

namespace ringkv::model {

class ModelCaches {
 public:
  explicit ModelCaches(const ModelConfig& config);
  ModelCaches(ModelCaches&&) noexcept = default;
  ModelCaches& operator=(ModelCaches&&) noexcept = default;

  // What TinyTransformer::Forward and BeginSpeculation take: one cache per layer.
  std::span<AttentionCache* const> Layers() const noexcept { return pointers_; }
  AttentionCache& Layer(int layer) const;
  LayerKind Kind(int layer) const;
  int Offset() const noexcept;

  // Bytes of storage the layers of `kind` hold (sum over those layers).
  std::size_t AllocatedBytes(LayerKind kind) const;

  // Every layer at once (LayerCaches): null when there is nothing to snapshot.
  std::unique_ptr<LayerSnapshot> Snapshot(int from_offset) const;
  // All layers or none: false, with nothing changed, when some layer cannot.
  bool Restore(const LayerSnapshot* snapshot, int target);
  void Free() noexcept;
  // Copies that share every storage block copy-on-write (KVCache / RotatingKVCache
  // Fork): O(blocks), for a draft run that must not disturb these caches.
  ModelCaches Fork() const;

 private:
  ModelCaches(LayerCaches caches, std::vector<LayerKind> kinds);

  LayerCaches caches_;
  std::vector<AttentionCache*> pointers_;  // into caches_ (stable: its vector never grows)
  std::vector<LayerKind> kinds_;
};

}  // namespace ringkv::model
