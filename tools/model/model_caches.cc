#include "model_caches.h"

#include <gsl/assert>
#include <gsl/narrow>

#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv::model {
namespace {

std::vector<LayerKind> Kinds(const ModelConfig& config) {
  config.Validate();
  std::vector<LayerKind> kinds;
  for (int i = 0; i < config.layers; ++i) kinds.push_back(config.KindOf(i));
  return kinds;
}

// The layer pattern of LayerCaches::Interleaved, built here because Interleaved
// takes float storage dtypes only and the model's may be int8 / int4.
LayerCaches Build(const ModelConfig& config) {
  config.Validate();
  std::vector<LayerCaches::Layer> layers;
  for (int i = 0; i < config.layers; ++i) {
    if (config.KindOf(i) == LayerKind::kGlobal) {
      layers.emplace_back(KVCache(KVCache::kDefaultBlockTokens, config.kv_dtype));
    } else {
      layers.emplace_back(
          RotatingKVCache(config.window, RotatingKVCache::kDefaultBlockTokens, config.kv_dtype));
    }
  }
  return LayerCaches(std::move(layers));
}

}  // namespace

ModelCaches::ModelCaches(const ModelConfig& config) : ModelCaches(Build(config), Kinds(config)) {}

ModelCaches::ModelCaches(LayerCaches caches, std::vector<LayerKind> kinds)
    : caches_(std::move(caches)), pointers_(caches_.Caches()), kinds_(std::move(kinds)) {
  Expects(pointers_.size() == kinds_.size());
  for (std::size_t i = 0; i < kinds_.size(); ++i) {
    Expects((kinds_[i] == LayerKind::kGlobal) == (dynamic_cast<KVCache*>(pointers_[i]) != nullptr));
  }
}

AttentionCache& ModelCaches::Layer(int layer) const {
  return *pointers_.at(gsl::narrow<std::size_t>(layer));
}

LayerKind ModelCaches::Kind(int layer) const { return kinds_.at(gsl::narrow<std::size_t>(layer)); }

int ModelCaches::Offset() const noexcept { return pointers_.front()->Offset(); }

std::size_t ModelCaches::AllocatedBytes(LayerKind kind) const {
  std::size_t total = 0;
  for (std::size_t i = 0; i < pointers_.size(); ++i) {
    if (kinds_[i] != kind) continue;
    if (kind == LayerKind::kGlobal) {
      total += static_cast<const KVCache&>(*pointers_[i]).AllocatedBytes();
    } else {
      total += static_cast<const RotatingKVCache&>(*pointers_[i]).AllocatedBytes();
    }
  }
  return total;
}

std::unique_ptr<LayerSnapshot> ModelCaches::Snapshot(int from_offset) const {
  return caches_.Snapshot(from_offset);
}

bool ModelCaches::Restore(const LayerSnapshot* snapshot, int target) {
  return caches_.Restore(snapshot, target);
}

void ModelCaches::Free() noexcept { caches_.Free(); }

ModelCaches ModelCaches::Fork() const {
  std::vector<LayerCaches::Layer> layers;
  for (std::size_t i = 0; i < pointers_.size(); ++i) {
    if (kinds_[i] == LayerKind::kGlobal) {
      layers.emplace_back(static_cast<const KVCache&>(*pointers_[i]).Fork());
    } else {
      layers.emplace_back(static_cast<const RotatingKVCache&>(*pointers_[i]).Fork());
    }
  }
  return ModelCaches(LayerCaches(std::move(layers)), kinds_);
}

}  // namespace ringkv::model
