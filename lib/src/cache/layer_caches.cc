#include "ringkv/layer_caches.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "dtype_check.h"
#include "kv_input.h"
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

const Snapshot* LayerSnapshot::Layer(std::size_t layer) const {
  CheckIndex("Layer", layer);
  return layers_[layer].get();
}

void LayerSnapshot::CheckIndex(const char* function, std::size_t layer) const {
  if (layer >= layers_.size()) {
    throw Error(fmt::format("[LayerSnapshot::{}] layer {} is out of range for {} layers", function,
                            layer, layers_.size()));
  }
}

std::size_t LayerSnapshot::Size() const noexcept {
  std::size_t total = 0;
  for (const auto& s : layers_) total += s == nullptr ? 0 : s->Size();
  return total;
}

namespace {

// Layer i global when (i + 1) % global_every == 0, each layer built by make(global).
template <class Make>
std::vector<LayerCaches::Layer> InterleavedLayers(int layers, int global_every, int window,
                                                  const Make& make) {
  if (layers < 1 || global_every < 1 || window < 1) {
    throw Error(fmt::format(
        "[LayerCaches::Interleaved] layers {}, global_every {} and window {} must all be >= 1",
        layers, global_every, window));
  }
  std::vector<LayerCaches::Layer> caches;
  caches.reserve(static_cast<std::size_t>(layers));
  for (int i = 0; i < layers; ++i) caches.push_back(make((i + 1) % global_every == 0));
  return caches;
}

}  // namespace

LayerCaches LayerCaches::Interleaved(int layers, int global_every, int window,
                                     std::int64_t block_tokens,
                                     std::optional<DType> storage_dtype) {
  if (storage_dtype.has_value() && IsQuantized(*storage_dtype)) {
    return Interleaved(layers, global_every, window, block_tokens, KvStorage::Same(*storage_dtype));
  }
  if (storage_dtype.has_value()) detail::CheckDType("LayerCaches::Interleaved", *storage_dtype);
  return LayerCaches(InterleavedLayers(layers, global_every, window, [&](bool global) -> Layer {
    if (global) return KVCache(block_tokens, storage_dtype);
    return RotatingKVCache(window, block_tokens, storage_dtype);
  }));
}

LayerCaches LayerCaches::Interleaved(int layers, int global_every, int window,
                                     std::int64_t block_tokens, KvStorage storage) {
  return LayerCaches(InterleavedLayers(layers, global_every, window, [&](bool global) -> Layer {
    if (global) return KVCache(block_tokens, storage);
    return RotatingKVCache(window, block_tokens, storage);
  }));
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

void LayerCaches::CheckOneOffset(const char* function) const {
  const std::vector<int> offsets = Offsets();
  for (int offset : offsets) {
    if (offset != offsets.front()) {
      throw Error(fmt::format("[LayerCaches::{}] the layers are at different offsets: [{}]",
                              function, fmt::join(offsets, ", ")));
    }
  }
}

int LayerCaches::Offset() const {
  CheckOneOffset("Offset");
  return layers_.empty() ? 0 : AsCache(layers_.front()).Offset();
}

void LayerCaches::CheckLayers(const char* function, const LayerSnapshot* snapshot) const {
  if (snapshot != nullptr && snapshot->Layers() != layers_.size()) {
    throw SnapshotError(fmt::format("[LayerCaches::{}] the snapshot has {} layers, the caches {}",
                                    function, snapshot->Layers(), layers_.size()));
  }
}

void LayerCaches::CheckSnapshot(const char* function, const char* role,
                                const LayerSnapshot& snapshot) const {
  CheckLayers(function, &snapshot);
  const std::string where = fmt::format("LayerCaches::{}", function);
  std::vector<std::string> ends;  // per layer; "-" without a snapshot
  int common = -1;
  bool mixed = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const ringkv::Snapshot* s = snapshot.layers_[i].get();
    if (s == nullptr) {
      ends.emplace_back("-");
      continue;
    }
    const std::string layer_where = fmt::format("{}] [layer {}", where, i);
    if (const auto* ring = std::get_if<RotatingKVCache>(&layers_[i])) {
      (void)detail::AsRing(layer_where.c_str(), role, *s, ring->MaxSize());
    } else {
      (void)detail::AsKv(layer_where.c_str(), *s);
    }
    mixed = mixed || (common >= 0 && s->ToOffset() != common);
    common = s->ToOffset();
    ends.push_back(std::to_string(common));
  }
  if (mixed) {
    throw SnapshotError(fmt::format("[{}] the {}'s layers end at different offsets: [{}]", where,
                                    role, fmt::join(ends, ", ")));
  }
}

std::unique_ptr<LayerSnapshot> LayerCaches::Snapshot(int from_offset) const {
  CheckOneOffset("Snapshot");
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

bool LayerCaches::CanRewind(int target) const {
  detail::CheckTarget("LayerCaches::CanRewind", target);
  return std::all_of(layers_.begin(), layers_.end(),
                     [&](const Layer& layer) { return AsCache(layer).CanRewind(target); });
}

bool LayerCaches::Rewind(int target) {
  detail::CheckTarget("LayerCaches::Rewind", target);
  // CanRewind refuses without forking; Restore then swaps every layer or none.
  return CanRewind(target) && Restore(nullptr, target);
}

int LayerCaches::Trim(int n) {
  if (n < 0) throw Error(fmt::format("[LayerCaches::Trim] n {} is negative", n));
  CheckOneOffset("Trim");
  const int offset = layers_.empty() ? 0 : AsCache(layers_.front()).Offset();
  const int removed = std::min(n, offset);
  return CanRewind(offset - removed) && Restore(nullptr, offset - removed) ? removed : 0;
}

std::unique_ptr<LayerSnapshot> LayerCaches::Merge(std::unique_ptr<LayerSnapshot>&& parent,
                                                  std::unique_ptr<LayerSnapshot>&& child) const {
  // Validate everything, so a bad pair cannot leave half the layers merged.
  if (parent != nullptr) CheckSnapshot("Merge", "parent", *parent);
  if (child != nullptr) CheckSnapshot("Merge", "child", *child);
  const auto layer_of = [](const std::unique_ptr<LayerSnapshot>& s, std::size_t i) {
    return s == nullptr ? nullptr : s->layers_[i].get();
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const ringkv::Snapshot* p = layer_of(parent, i);
    const ringkv::Snapshot* c = layer_of(child, i);
    if (std::holds_alternative<KVCache>(layers_[i]) && p != nullptr && c != nullptr) {
      const std::string where = fmt::format("LayerCaches::Merge] [layer {}", i);
      detail::CheckKvMerge(where.c_str(), detail::AsKv("", *p), detail::AsKv("", *c));
    }
  }
  // Build the merged spans (may allocate); the inputs are still untouched.
  auto result = std::make_unique<LayerSnapshot>();
  result->layers_.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const ringkv::Snapshot* p = layer_of(parent, i);
    const ringkv::Snapshot* c = layer_of(child, i);
    if (std::holds_alternative<KVCache>(layers_[i]) && p != nullptr && c != nullptr) {
      result->layers_[i] = detail::MergeKv(detail::AsKv("", *p), detail::AsKv("", *c));
    }
  }
  // Nothing below throws: a ring keeps the child (it holds the whole window);
  // with a null side a span is released, as KVCache::Merge does.
  bool any = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (std::holds_alternative<RotatingKVCache>(layers_[i]) && child != nullptr) {
      result->layers_[i] = std::move(child->layers_[i]);
    }
    any = any || result->layers_[i] != nullptr;
  }
  parent.reset();
  child.reset();
  return any ? std::move(result) : nullptr;
}

std::pair<std::unique_ptr<LayerSnapshot>, std::unique_ptr<LayerSnapshot>> LayerCaches::Split(
    std::unique_ptr<LayerSnapshot>&& snapshot, int at) const {
  if (snapshot == nullptr) return {nullptr, nullptr};
  CheckSnapshot("Split", "snapshot", *snapshot);
  auto first = std::make_unique<LayerSnapshot>();
  auto second = std::make_unique<LayerSnapshot>();
  first->layers_.resize(layers_.size());
  second->layers_.resize(layers_.size());
  // Build the interior splits (may allocate); the input is still untouched.
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const ringkv::Snapshot* s = snapshot->layers_[i].get();
    if (s == nullptr || !std::holds_alternative<KVCache>(layers_[i])) continue;
    const std::int64_t split = detail::SplitPoint(*s, at);
    if (split > 0 && split < s->ToOffset() - s->FromOffset()) {
      std::tie(first->layers_[i], second->layers_[i]) = detail::SplitKv(detail::AsKv("", *s), at);
    }
  }
  // Nothing below throws: whole snapshots go to one side (a ring to the second).
  bool any_first = false, any_second = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::unique_ptr<ringkv::Snapshot>& s = snapshot->layers_[i];
    if (s != nullptr && first->layers_[i] == nullptr && second->layers_[i] == nullptr) {
      const bool ring = std::holds_alternative<RotatingKVCache>(layers_[i]);
      (ring || detail::SplitPoint(*s, at) <= 0 ? second : first)->layers_[i] = std::move(s);
    }
    any_first = any_first || first->layers_[i] != nullptr;
    any_second = any_second || second->layers_[i] != nullptr;
  }
  snapshot.reset();
  return {any_first ? std::move(first) : nullptr, any_second ? std::move(second) : nullptr};
}

void LayerCaches::Free() noexcept {
  for (Layer& layer : layers_) AsCache(layer).Free();
}

}  // namespace ringkv
