#include "snapshot_access.h"

#include <fmt/format.h>

#include <gsl/assert>

#include "../cache/snapshots.h"
#include "ringkv/dtype.h"

namespace ringkv::detail {

std::optional<KvLayout> LayoutOf(const Snapshot* snapshot) {
  const BlockStore* store = nullptr;
  if (const auto* kv = dynamic_cast<const KvSnapshot*>(snapshot)) store = &kv->Data();
  if (const auto* ring = dynamic_cast<const RotatingSnapshot*>(snapshot)) store = &ring->Data();
  if (store == nullptr || !store->HasLayout()) return std::nullopt;
  return store->Layout();
}

Layouts CacheLayouts(const LayerCaches& caches) {
  Layouts out(caches.Size());
  for (std::size_t i = 0; i < caches.Size(); ++i) {
    const int offset = caches[i].Offset();
    // The last token alone: O(1) blocks for either cache kind's Snapshot.
    if (offset > 0) out[i] = LayoutOf(caches[i].Snapshot(offset - 1).get());
  }
  return out;
}

Layouts LayoutsOf(const LayerSnapshot* snapshot, std::size_t layers) {
  Layouts out(layers);
  if (snapshot == nullptr) return out;
  for (std::size_t i = 0; i < layers && i < snapshot->Layers(); ++i) {
    out[i] = LayoutOf(snapshot->Layer(i));
  }
  return out;
}

std::string LayoutName(const KvLayout& layout) {
  return fmt::format("{} x {} heads, key dim {}, value dim {}",
                     DtypesName(layout.key_dtype, layout.value_dtype), layout.heads, layout.k_dim,
                     layout.v_dim);
}

int FirstMismatch(std::span<const std::optional<KvLayout>> a,
                  std::span<const std::optional<KvLayout>> b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].has_value() && b[i].has_value() && !(*a[i] == *b[i])) return static_cast<int>(i);
  }
  return -1;
}

void MergeLayouts(Layouts& into, std::span<const std::optional<KvLayout>> from) {
  for (std::size_t i = 0; i < into.size() && i < from.size(); ++i) {
    if (from[i].has_value()) into[i] = from[i];
  }
}

std::unique_ptr<Snapshot> ShareCopy(const Snapshot* snapshot) {
  if (snapshot == nullptr) return nullptr;
  if (const auto* kv = dynamic_cast<const KvSnapshot*>(snapshot)) {
    return std::make_unique<KvSnapshot>(kv->Data(), kv->FromOffset(), kv->ToOffset());
  }
  if (const auto* ring = dynamic_cast<const RotatingSnapshot*>(snapshot)) {
    return std::make_unique<RotatingSnapshot>(ring->Data(), ring->FromOffset(), ring->ToOffset(),
                                              ring->RingIndex(), ring->Window());
  }
  // The trie only ever holds the two kinds above (made by its caches or imported).
  Expects(false);
  return nullptr;
}

std::unique_ptr<LayerSnapshot> ShareCopy(const LayerSnapshot* snapshot) {
  if (snapshot == nullptr) return nullptr;
  std::vector<std::unique_ptr<Snapshot>> layers;
  layers.reserve(snapshot->Layers());
  for (std::size_t i = 0; i < snapshot->Layers(); ++i)
    layers.push_back(ShareCopy(snapshot->Layer(i)));
  return std::make_unique<LayerSnapshot>(std::move(layers));
}

}  // namespace ringkv::detail
