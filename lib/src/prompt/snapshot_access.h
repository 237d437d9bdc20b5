#pragma once
// What the prompt cache reads from the cache module's snapshot kinds
// (../cache/snapshots.h): the K/V layout they hold, and copies that share their
// blocks (so a combining call can fail without consuming the trie's snapshots).

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../cache/block_store.h"
#include "ringkv/layer_caches.h"

namespace ringkv::detail {

using Layouts = std::vector<std::optional<KvLayout>>;  // per layer; unset: unknown

// The layout a snapshot's K/V have; unset for null or an empty snapshot.
std::optional<KvLayout> LayoutOf(const Snapshot* snapshot);
// Per layer, the layout of the K/V the caches hold (unset for a layer at offset 0).
Layouts CacheLayouts(const LayerCaches& caches);
// Per layer, the layout of a multi-layer snapshot (all unset for null).
Layouts LayoutsOf(const LayerSnapshot* snapshot, std::size_t layers);
// e.g. "f16 x 8 heads, key dim 128, value dim 128".
std::string LayoutName(const KvLayout& layout);
// The first layer where both are set and differ, or -1.
int FirstMismatch(std::span<const std::optional<KvLayout>> a,
                  std::span<const std::optional<KvLayout>> b);
// `into` takes every layout `from` has set.
void MergeLayouts(Layouts& into, std::span<const std::optional<KvLayout>> from);

// A snapshot of the same kind and contents sharing every block: O(blocks), no
// data copy. Null for null.
std::unique_ptr<Snapshot> ShareCopy(const Snapshot* snapshot);
std::unique_ptr<LayerSnapshot> ShareCopy(const LayerSnapshot* snapshot);

}  // namespace ringkv::detail
