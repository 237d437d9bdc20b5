#include "ringkv/layer_caches.h"

#include <fmt/format.h>

#include "ringkv/error.h"
#include "snapshots.h"

namespace ringkv {
namespace {

AttentionCache& AsCache(LayerCaches::Layer& layer) {
  return std::visit([](auto& c) -> AttentionCache& { return c; }, layer);
}
const AttentionCache& AsCache(const LayerCaches::Layer& layer) {
  return std::visit([](const auto& c) -> const AttentionCache& { return c; }, layer);
}

}  // namespace

std::size_t LayerSnapshot::Size() const noexcept {
  std::size_t total = 0;
  for (const auto& s : layers_) total += s == nullptr ? 0 : s->Size();
  return total;
}

LayerCaches LayerCaches::Interleaved(int layers, int global_every, int window,
                                     std::int64_t block_tokens) {
  if (layers < 1 || global_every < 1 || window < 1) {
    throw Error(fmt::format(
        "[LayerCaches::Interleaved] layers {}, global_every {} and window {} must all be >= 1",
        layers, global_every, window));
  }
  std::vector<Layer> caches;
  caches.reserve(static_cast<std::size_t>(layers));
  for (int i = 0; i < layers; ++i) {
    if ((i + 1) % global_every == 0) {
      caches.emplace_back(std::in_place_type<KVCache>, block_tokens);
    } else {
      caches.emplace_back(std::in_place_type<RotatingKVCache>, window, block_tokens);
    }
  }
  return LayerCaches(std::move(caches));
}

LayerCaches::LayerCaches(std::vector<Layer> layers) : layers_(std::move(layers)) {}

AttentionCache& LayerCaches::operator[](std::size_t layer) {
  if (layer >= layers_.size()) {
    throw Error(
        fmt::format("[LayerCaches] layer {} is out of range for {} layers", layer, layers_.size()));
  }
  return AsCache(layers_[layer]);
}

const AttentionCache& LayerCaches::operator[](std::size_t layer) const {
  return const_cast<LayerCaches&>(*this)[layer];
}

std::vector<AttentionCache*> LayerCaches::Caches() {
  std::vector<AttentionCache*> caches;
  for (Layer& layer : layers_) caches.push_back(&AsCache(layer));
  return caches;
}

std::vector<int> LayerCaches::Offsets() const {
  std::vector<int> offsets;
  for (const Layer& layer : layers_) offsets.push_back(AsCache(layer).Offset());
  return offsets;
}

void LayerCaches::CheckLayers(const char* function, const LayerSnapshot* snapshot) const {
  if (snapshot != nullptr && snapshot->Layers() != layers_.size()) {
    throw SnapshotError(fmt::format("[LayerCaches::{}] the snapshot has {} layers, the caches {}",
                                    function, snapshot->Layers(), layers_.size()));
  }
}

std::unique_ptr<LayerSnapshot> LayerCaches::Snapshot(int from_offset) const {
  auto result = std::make_unique<LayerSnapshot>();
  bool any = false;
  for (const Layer& layer : layers_) {
    result->layers_.push_back(AsCache(layer).Snapshot(from_offset));
    any = any || result->layers_.back() != nullptr;
  }
  return any ? std::move(result) : nullptr;
}

bool LayerCaches::Restore(const LayerSnapshot* snapshot, int target) {
  CheckLayers("Restore", snapshot);
  // Prepare: restore forks that share every block; nothing live changes yet.
  std::vector<Layer> prepared;
  prepared.reserve(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    prepared.push_back(std::visit([](const auto& c) -> Layer { return c.Fork(); }, layers_[i]));
    const ringkv::Snapshot* layer_snapshot = snapshot == nullptr ? nullptr : snapshot->Layer(i);
    if (!AsCache(prepared.back()).Restore(layer_snapshot, target)) return false;
  }
  // Commit: noexcept swaps.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::visit(
        [&](auto& live) {
          using T = std::decay_t<decltype(live)>;
          live.Swap(std::get<T>(prepared[i]));
        },
        layers_[i]);
  }
  return true;
}

std::unique_ptr<LayerSnapshot> LayerCaches::Merge(std::unique_ptr<LayerSnapshot> parent,
                                                  std::unique_ptr<LayerSnapshot> child) const {
  CheckLayers("Merge", parent.get());
  CheckLayers("Merge", child.get());
  // Validate every layer first, so a bad pair cannot leave half the layers merged.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const ringkv::Snapshot* p = parent == nullptr ? nullptr : parent->Layer(i);
    const ringkv::Snapshot* c = child == nullptr ? nullptr : child->Layer(i);
    const bool plain = std::holds_alternative<KVCache>(layers_[i]);
    for (const ringkv::Snapshot* s : {p, c}) {
      const bool kv = dynamic_cast<const detail::KvSnapshot*>(s) != nullptr;
      if (s != nullptr && kv != plain) {
        throw SnapshotError(fmt::format(
            "[LayerCaches::Merge] layer {}: the snapshot was made by another cache kind", i));
      }
    }
    if (plain && p != nullptr && c != nullptr && p->ToOffset() != c->FromOffset()) {
      throw SnapshotError(fmt::format(
          "[LayerCaches::Merge] layer {}: parent covers [{}, {}), child [{}, {}): not adjacent", i,
          p->FromOffset(), p->ToOffset(), c->FromOffset(), c->ToOffset()));
    }
  }
  auto result = std::make_unique<LayerSnapshot>();
  bool any = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::unique_ptr<ringkv::Snapshot> p =
        parent == nullptr ? nullptr : std::move(parent->layers_[i]);
    std::unique_ptr<ringkv::Snapshot> c = child == nullptr ? nullptr : std::move(child->layers_[i]);
    result->layers_.push_back(AsCache(layers_[i]).Merge(std::move(p), std::move(c)));
    any = any || result->layers_.back() != nullptr;
  }
  return any ? std::move(result) : nullptr;
}

std::pair<std::unique_ptr<LayerSnapshot>, std::unique_ptr<LayerSnapshot>> LayerCaches::Split(
    std::unique_ptr<LayerSnapshot> snapshot, int at) const {
  if (snapshot == nullptr) return {nullptr, nullptr};
  CheckLayers("Split", snapshot.get());
  auto first = std::make_unique<LayerSnapshot>();
  auto second = std::make_unique<LayerSnapshot>();
  bool any_first = false, any_second = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto [a, b] = AsCache(layers_[i]).Split(std::move(snapshot->layers_[i]), at);
    any_first = any_first || a != nullptr;
    any_second = any_second || b != nullptr;
    first->layers_.push_back(std::move(a));
    second->layers_.push_back(std::move(b));
  }
  return {any_first ? std::move(first) : nullptr, any_second ? std::move(second) : nullptr};
}

void LayerCaches::Free() noexcept {
  for (Layer& layer : layers_) AsCache(layer).Free();
}

}  // namespace ringkv
