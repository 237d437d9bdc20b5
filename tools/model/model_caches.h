#pragma once
// One cache per layer, built from the config's layer pattern: a KVCache on global
// layers, a RotatingKVCache(window) on sliding ones. Snapshots and restores act on
// every layer together.
//
// Interim: the library's multi-layer container (lib/ringkv/layer_caches.h) has
// not landed yet; this one is the small subset the model needs, and unlike the
// library's it does not promise atomic failure (the model only restores targets
// that every layer can reach).

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "model_config.h"
#include "ringkv/cache.h"
#include "ringkv/snapshot.h"

namespace ringkv::model {

// One snapshot per layer (null entries where a layer had nothing to snapshot).
struct ModelSnapshot {
  std::vector<std::unique_ptr<ringkv::Snapshot>> layers;
  std::size_t Bytes() const;
};

class ModelCaches {
 public:
  explicit ModelCaches(const ModelConfig& config);
  ModelCaches(ModelCaches&&) noexcept = default;
  ModelCaches& operator=(ModelCaches&&) noexcept = default;

  // What TinyTransformer::Forward takes: one cache per layer.
  std::span<AttentionCache* const> Layers() const noexcept { return pointers_; }
  AttentionCache& Layer(int layer) const;
  LayerKind Kind(int layer) const;
  int Offset() const noexcept;

  // Bytes of storage the layers of `kind` hold (sum over those layers).
  std::size_t AllocatedBytes(LayerKind kind) const;

  ModelSnapshot Snapshot(int from_offset) const;
  // false when some layer cannot reach the target (see Cache::Restore).
  bool Restore(const ModelSnapshot* snapshot, int target);
  void Free() noexcept;

 private:
  std::vector<std::unique_ptr<AttentionCache>> caches_;
  std::vector<AttentionCache*> pointers_;
  std::vector<LayerKind> kinds_;
};

}  // namespace ringkv::model
