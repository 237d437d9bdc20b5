#pragma once
// The prompt cache's trie and bookkeeping (private). See ringkv/prompt_cache.h
// and docs/prompt_cache.md.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "held_blocks.h"
#include "ringkv/layer_caches.h"
#include "ringkv/prompt_cache.h"
#include "snapshot_access.h"
#include "token_trie.h"

namespace ringkv::detail {

struct PromptNode {
  PromptNode() = default;
  // Destroys the subtree without recursing per level (a decode loop committing
  // every step builds chains of millions of nodes).
  ~PromptNode();
  PromptNode(const PromptNode&) = delete;
  PromptNode& operator=(const PromptNode&) = delete;

  std::vector<int> tokens;  // the edge; tokens.size() == end - start (root: empty)
  int start = 0;
  int end = 0;
  // Per layer: KVCache -> tokens [start, end); RotatingKVCache -> the window at
  // `end`, or null when no state at `end` was captured. Null when all are null.
  std::unique_ptr<LayerSnapshot> snapshot;
  std::uint64_t last_used = 0;
  bool pinned = false;  // pinned nodes' ancestors are pinned too
  PromptNode* parent = nullptr;
  std::vector<std::unique_ptr<PromptNode>> children;

  std::size_t Bytes() const noexcept { return snapshot == nullptr ? 0 : snapshot->Size(); }
  const Snapshot* Layer(std::size_t layer) const {
    return snapshot == nullptr ? nullptr : snapshot->Layer(layer);
  }
};

using TriePath = TriePathOf<PromptNode>;

struct PromptState {
  PromptState(LayerCaches& c, PromptCacheOptions o);

  LayerCaches& caches;
  PromptCacheOptions options;
  std::vector<int> windows;  // per layer: 0 for a KVCache, max_size for a RotatingKVCache
  std::vector<std::int64_t> block_tokens;  // per layer, the cache's
  bool has_windows = false;
  // Per layer, the K/V layout of every snapshot held (nodes and pending); unset
  // while nothing is held. Merging spans of two layouts is impossible, so every
  // way in (Commit, Checkpoint, Load) checks against it.
  Layouts layouts;
  std::unique_ptr<PromptNode> root;
  std::uint64_t clock = 0;
  HeldBlocks held;  // the blocks of every node's and pending snapshot
  PromptCacheStats stats;
  // What the live caches hold, as far as the prompt cache knows.
  std::vector<int> live_tokens;
  // Sliding-window states captured during prefill, by offset, until Commit.
  std::map<int, std::unique_ptr<LayerSnapshot>> pending;

  std::size_t Layers() const noexcept { return windows.size(); }
  std::size_t Bytes() const noexcept { return held.Bytes(); }
  // Every layer's offset equals live_tokens.size().
  bool LiveConsistent() const;
  std::uint64_t Tick() noexcept { return ++clock; }
  // Forgets the layouts once nothing is held (a new layout may follow).
  void ForgetLayoutsIfEmpty() noexcept;
};

// prompt_trie.cc
TriePath Walk(const PromptNode& root, std::span<const int> tokens);
// Divides `node` at offset `at` (start < at < end): node keeps [start, at), a new
// only child takes [at, end) with node's children. KV snapshots split; the
// windows at `end` move to the child; `window_at` (may be null) supplies the
// windows at `at`. Returns node.
PromptNode& SplitNode(PromptState& s, PromptNode& node, int at,
                      std::unique_ptr<LayerSnapshot> window_at);
// Fills node's missing windows from `windows` (captured at node.end, already
// held); the windows not kept are released.
void FillWindows(PromptState& s, PromptNode& node, std::unique_ptr<LayerSnapshot> windows);
// Compacts the small snapshots (spans and windows) of a snapshot about to enter
// the trie, before it is held (span_storage.h).
void CompactSmall(const PromptState& s, LayerSnapshot* snapshot);
// Nodes on the path the live caches hold.
std::vector<const PromptNode*> ActivePath(const PromptState& s);
// Evicts until Bytes() <= budget: LRU nodes off the active path first (a leaf is
// removed, a node with one child merged into it), then pending checkpoints, then
// the active path's unpinned tail, then pinned windows.
void EnforceBudget(PromptState& s);
// The held blocks' bytes recomputed by walking (a check of s.held).
std::size_t WalkBytes(const PromptState& s);
int MissingWindows(const PromptState& s, const PromptNode& node);
// Nodes below `root` in pre-order (parents before children), without recursion.
std::vector<PromptNode*> Preorder(const PromptNode& root);
// Nodes below `root` with their depth (1 for root's children), without recursion.
std::vector<std::pair<PromptNode*, int>> WithDepths(const PromptNode& root);

// prompt_restore.cc: Lookup's reachability rule and the restore itself.
PrefixMatch LookupAndRestore(PromptState& s, std::span<const int> tokens);

}  // namespace ringkv::detail
