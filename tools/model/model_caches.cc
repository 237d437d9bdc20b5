#include "model_caches.h"

#include <gsl/assert>
#include <gsl/narrow>

#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv::model {

std::size_t ModelSnapshot::Bytes() const {
  std::size_t total = 0;
  for (const auto& s : layers) total += s == nullptr ? 0 : s->Size();
  return total;
}

ModelCaches::ModelCaches(const ModelConfig& config) {
  config.Validate();
  for (int i = 0; i < config.layers; ++i) {
    const LayerKind kind = config.KindOf(i);
    if (kind == LayerKind::kGlobal) {
      caches_.push_back(std::make_unique<KVCache>());
    } else {
      caches_.push_back(std::make_unique<RotatingKVCache>(config.window));
    }
    kinds_.push_back(kind);
    pointers_.push_back(caches_.back().get());
  }
}

AttentionCache& ModelCaches::Layer(int layer) const {
  return *caches_.at(gsl::narrow<std::size_t>(layer));
}

LayerKind ModelCaches::Kind(int layer) const { return kinds_.at(gsl::narrow<std::size_t>(layer)); }

int ModelCaches::Offset() const noexcept { return caches_.front()->Offset(); }

std::size_t ModelCaches::AllocatedBytes(LayerKind kind) const {
  std::size_t total = 0;
  for (std::size_t i = 0; i < caches_.size(); ++i) {
    if (kinds_[i] != kind) continue;
    if (kind == LayerKind::kGlobal) {
      total += static_cast<const KVCache&>(*caches_[i]).AllocatedBytes();
    } else {
      total += static_cast<const RotatingKVCache&>(*caches_[i]).AllocatedBytes();
    }
  }
  return total;
}

ModelSnapshot ModelCaches::Snapshot(int from_offset) const {
  ModelSnapshot snapshot;
  for (const auto& cache : caches_) snapshot.layers.push_back(cache->Snapshot(from_offset));
  return snapshot;
}

bool ModelCaches::Restore(const ModelSnapshot* snapshot, int target) {
  Expects(snapshot == nullptr || snapshot->layers.size() == caches_.size());
  bool ok = true;
  for (std::size_t i = 0; i < caches_.size(); ++i) {
    const ringkv::Snapshot* layer = snapshot == nullptr ? nullptr : snapshot->layers[i].get();
    ok = caches_[i]->Restore(layer, target) && ok;
  }
  return ok;
}

void ModelCaches::Free() noexcept {
  for (auto& cache : caches_) cache->Free();
}

}  // namespace ringkv::model
