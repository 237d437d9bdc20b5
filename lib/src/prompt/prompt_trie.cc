// The trie's structural operations: walk, split, merge, eviction.
#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>
#include <limits>
#include <set>
#include <unordered_set>

#include "../cache/layer_snapshot_access.h"
#include "prompt_state.h"
#include "ringkv/error.h"
#include "ringkv/rotating_kv_cache.h"
#include "snapshot_access.h"
#include "span_storage.h"

namespace ringkv::detail {
namespace {

std::unique_ptr<LayerSnapshot> EmptySnapshot(std::size_t layers) {
  return std::make_unique<LayerSnapshot>(std::vector<std::unique_ptr<Snapshot>>(layers));
}

std::size_t ChildIndex(const PromptNode& parent, const PromptNode& child) {
  const std::size_t i = ChildIndexOf(parent, child);
  Expects(i < parent.children.size());
  return i;
}

// Removes a childless node; its bytes leave the trie.
void RemoveLeaf(PromptState& s, PromptNode& node) {
  Expects(node.children.empty() && node.parent != nullptr);
  s.held.Remove(node.snapshot.get());
  PromptNode& parent = *node.parent;
  parent.children.erase(parent.children.begin() +
                        static_cast<std::ptrdiff_t>(ChildIndex(parent, node)));
  ++s.stats.evictions;
}

// The snapshot of a node folded into its only child: per KVCache layer the spans
// joined (MergeSpans, the form the trie keeps), per sliding layer the child's
// window (it supersedes the node's). The inputs are untouched.
std::unique_ptr<LayerSnapshot> Merged(const PromptState& s, const PromptNode& node,
                                      const PromptNode& child) {
  std::vector<std::unique_ptr<Snapshot>> layers(s.Layers());
  bool any = false;
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    const Snapshot* p = node.Layer(i);
    const Snapshot* c = child.Layer(i);
    if (s.windows[i] > 0) {
      layers[i] = ShareCopy(c);
    } else if (p != nullptr && c != nullptr) {
      layers[i] = MergeSpans(*p, *c, s.block_tokens[i]);
    }
    any = any || layers[i] != nullptr;
  }
  return any ? std::make_unique<LayerSnapshot>(std::move(layers)) : nullptr;
}

// Folds a node with one child into that child: the child then covers both
// edges, the KV spans join, the node's windows are released. All or nothing:
// the merged snapshot is built first, and the trie changes only once it exists.
void MergeIntoChild(PromptState& s, PromptNode& node) {
  Expects(node.children.size() == 1 && node.parent != nullptr);
  PromptNode& child = *node.children.front();
  std::unique_ptr<LayerSnapshot> merged = Merged(s, node, child);
  std::vector<int> tokens;
  tokens.reserve(node.tokens.size() + child.tokens.size());
  tokens.insert(tokens.end(), node.tokens.begin(), node.tokens.end());
  tokens.insert(tokens.end(), child.tokens.begin(), child.tokens.end());
  s.held.Add(merged.get());
  // Nothing below throws.
  s.held.Remove(node.snapshot.get());
  s.held.Remove(child.snapshot.get());
  child.snapshot = std::move(merged);
  child.tokens.swap(tokens);
  child.start = node.start;
  child.last_used = std::max(child.last_used, node.last_used);
  PromptNode& parent = *node.parent;
  child.parent = &parent;
  std::unique_ptr<PromptNode> owned = std::move(node.children.front());
  parent.children[ChildIndex(parent, node)] = std::move(owned);  // destroys node
  ++s.stats.evictions;
  ++s.stats.merges;
}

bool DropLastPending(PromptState& s) {
  if (s.pending.empty()) return false;
  auto last = std::prev(s.pending.end());
  s.held.Remove(last->second.get());
  s.pending.erase(last);
  return true;
}

// Drops the windows of the deepest pinned node that has any (pinned KV spans fit
// the budget, Pin checks it): the prefix stays cached, lookups land earlier.
bool DropPinnedWindows(PromptState& s) {
  std::vector<std::pair<PromptNode*, int>> nodes = WithDepths(*s.root);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (auto& [node, depth] : nodes) {
    if (node->snapshot == nullptr) continue;
    bool dropped = false;
    for (std::size_t i = 0; i < s.Layers(); ++i) {
      if (s.windows[i] > 0 && node->snapshot->Layer(i) != nullptr) {
        s.held.Remove(node->snapshot->Layer(i));
        LayerSnapshotAccess::Reset(*node->snapshot, i, nullptr);
        dropped = true;
      }
    }
    if (dropped) return true;
  }
  return false;
}

}  // namespace

PromptState::PromptState(LayerCaches& c, PromptCacheOptions o)
    : caches(c), options(std::move(o)), layouts(c.Size()), root(std::make_unique<PromptNode>()) {
  for (std::size_t i = 0; i < caches.Size(); ++i) {
    const auto* ring = dynamic_cast<const RotatingKVCache*>(&caches[i]);
    windows.push_back(ring == nullptr ? 0 : ring->MaxSize());
    block_tokens.push_back(ring == nullptr ? dynamic_cast<const KVCache&>(caches[i]).BlockTokens()
                                           : ring->BlockTokens());
    has_windows = has_windows || ring != nullptr;
  }
}

void PromptState::ForgetLayoutsIfEmpty() noexcept {
  if (!root->children.empty() || !pending.empty()) return;
  for (auto& layout : layouts) layout.reset();
}

bool PromptState::LiveConsistent() const {
  const auto n = static_cast<int>(live_tokens.size());
  return std::ranges::all_of(caches.Offsets(), [n](int o) { return o == n; });
}

TriePath Walk(const PromptNode& root, std::span<const int> tokens) {
  return WalkTrie(root, tokens);
}

PromptNode& SplitNode(PromptState& s, PromptNode& node, int at,
                      std::unique_ptr<LayerSnapshot> window_at) {
  Expects(node.start < at && at < node.end);
  // Split a copy sharing the blocks, and allocate everything, before changing
  // node: it is intact if anything here throws.
  auto [first_half, second_half] = s.caches.Split(ShareCopy(node.snapshot.get()), at);
  auto second = std::make_unique<PromptNode>();
  const auto cut = static_cast<std::ptrdiff_t>(at - node.start);
  second->tokens.assign(node.tokens.begin() + cut, node.tokens.end());
  std::vector<std::unique_ptr<PromptNode>> only_child;
  only_child.reserve(1);
  // The halves share the node's blocks: held entries exist, nothing allocates.
  s.held.Add(first_half.get());
  s.held.Add(second_half.get());
  s.held.Remove(node.snapshot.get());
  second->start = at;
  second->end = node.end;
  second->last_used = node.last_used;
  second->pinned = node.pinned;
  second->parent = &node;
  second->children = std::move(node.children);
  for (auto& grandchild : second->children) grandchild->parent = second.get();
  // KV spans divide exactly (sizes add up); windows at `end` go to the second half.
  second->snapshot = std::move(second_half);
  node.snapshot = std::move(first_half);
  node.tokens.resize(static_cast<std::size_t>(cut));
  node.end = at;
  only_child.push_back(std::move(second));
  node.children = std::move(only_child);
  ++s.stats.splits;
  FillWindows(s, node, std::move(window_at));
  return node;
}

void FillWindows(PromptState& s, PromptNode& node, std::unique_ptr<LayerSnapshot> windows) {
  if (windows == nullptr) return;
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    if (s.windows[i] == 0 || node.Layer(i) != nullptr || windows->Layer(i) == nullptr) continue;
    if (windows->Layer(i)->ToOffset() != node.end) continue;
    if (node.snapshot == nullptr) node.snapshot = EmptySnapshot(s.Layers());
    LayerSnapshotAccess::Reset(*node.snapshot, i, LayerSnapshotAccess::Release(*windows, i));
  }
  s.held.Remove(windows.get());  // what was not kept
}

void CompactSmall(const PromptState& s, LayerSnapshot* snapshot) {
  if (snapshot == nullptr) return;
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    if (snapshot->Layer(i) == nullptr) continue;
    if (auto compact = Compact(*snapshot->Layer(i), s.block_tokens[i], s.windows[i])) {
      LayerSnapshotAccess::Reset(*snapshot, i, std::move(compact));
    }
  }
}

std::vector<const PromptNode*> ActivePath(const PromptState& s) {
  const TriePath path = Walk(*s.root, s.live_tokens);
  return {path.nodes.begin(), path.nodes.end()};
}

void EnforceBudget(PromptState& s) {
  std::set<const PromptNode*> unmergeable;
  while (s.Bytes() > s.options.byte_budget) {
    const std::vector<const PromptNode*> path = ActivePath(s);
    const std::unordered_set<const PromptNode*> active(path.begin(), path.end());
    const std::vector<std::pair<PromptNode*, int>> nodes = WithDepths(*s.root);
    PromptNode* victim = nullptr;
    int victim_depth = 0;
    for (auto& [node, depth] : nodes) {
      if (node->pinned || node->children.size() > 1 || unmergeable.contains(node)) continue;
      if (active.contains(node)) continue;
      // Least recently used first; among equals the deepest (leaves before their parents).
      if (victim == nullptr || node->last_used < victim->last_used ||
          (node->last_used == victim->last_used && depth > victim_depth)) {
        victim = node;
        victim_depth = depth;
      }
    }
    if (victim != nullptr) {
      if (victim->children.empty()) {
        RemoveLeaf(s, *victim);
      } else {
        try {
          MergeIntoChild(s, *victim);
        } catch (const Error&) {
          // Unreachable while every snapshot has one layout (Commit and Load check
          // it); a merge that fails changed nothing, so the node just stays.
          unmergeable.insert(victim);
        }
      }
      continue;
    }
    if (DropLastPending(s)) continue;
    // The live caches still hold the active path; its unpinned tail can go.
    if (!path.empty()) {
      auto* tail = const_cast<PromptNode*>(path.back());
      if (!tail->pinned && tail->children.empty()) {
        RemoveLeaf(s, *tail);
        continue;
      }
    }
    if (!DropPinnedWindows(s)) break;
  }
  s.stats.bytes = s.Bytes();
  s.stats.nodes = Preorder(*s.root).size();
  s.ForgetLayoutsIfEmpty();
}

std::size_t WalkBytes(const PromptState& s) {
  std::vector<std::pair<PromptNode*, int>> nodes = WithDepths(*s.root);
  HeldBlocks held;
  for (const auto& [node, depth] : nodes) held.Add(node->snapshot.get());
  for (const auto& [offset, snapshot] : s.pending) held.Add(snapshot.get());
  return held.Bytes();
}

int MissingWindows(const PromptState& s, const PromptNode& node) {
  int missing = 0;
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    if (s.windows[i] > 0 && node.Layer(i) == nullptr) ++missing;
  }
  return missing;
}

std::vector<PromptNode*> Preorder(const PromptNode& root) { return TriePreorder(root); }

std::vector<std::pair<PromptNode*, int>> WithDepths(const PromptNode& root) {
  return TrieWithDepths(root);
}

PromptNode::~PromptNode() { DestroySubtrees(std::move(children)); }

}  // namespace ringkv::detail
