// The pooled prompt cache's structural operations: held blocks, split, pins,
// eviction. Whole-sequence snapshots make them simpler than PromptCache's: a
// split needs no snapshot surgery (each half keeps or gets a snapshot of its
// own prefix) and an eviction drops references, never merges spans.
#include <algorithm>
#include <gsl/assert>

#include "sequence_prompt_state.h"
#include "sequence_snapshot_access.h"

namespace ringkv::detail {
namespace {

void RemoveChild(SequenceNode& parent, SequenceNode& child) {
  const std::size_t i = ChildIndexOf(parent, child);
  Expects(i < parent.children.size());
  parent.children.erase(parent.children.begin() + static_cast<std::ptrdiff_t>(i));
}

// A branch point left with one child folds into it (the child's snapshots
// already hold its prefix); one left with none is useless and goes.
void Compact(SequencePromptState& s, SequenceNode& node) {
  if (&node == s.root.get() || node.pinned || node.HasSnapshots()) return;
  SequenceNode& parent = *node.parent;
  if (node.children.empty()) {
    RemoveChild(parent, node);
    ++s.stats.evictions;
    Compact(s, parent);
    return;
  }
  if (node.children.size() != 1) return;
  SequenceNode& child = *node.children.front();
  std::vector<int> tokens;
  tokens.reserve(node.tokens.size() + child.tokens.size());
  tokens.insert(tokens.end(), node.tokens.begin(), node.tokens.end());
  tokens.insert(tokens.end(), child.tokens.begin(), child.tokens.end());
  // Nothing below throws.
  child.tokens.swap(tokens);
  child.start = node.start;
  child.last_used = std::max(child.last_used, node.last_used);
  child.parent = &parent;
  std::unique_ptr<SequenceNode> owned = std::move(node.children.front());
  parent.children[ChildIndexOf(parent, node)] = std::move(owned);  // destroys node
  ++s.stats.merges;
  ++s.stats.evictions;
}

}  // namespace

SequencePromptState::SequencePromptState(std::vector<CausalCache*> c, SequencePromptCacheOptions o)
    : caches(std::move(c)), options(o), root(std::make_unique<SequenceNode>()) {}

void HoldSnapshots(HeldBlocks& held, const std::vector<std::unique_ptr<SequenceSnapshot>>& snaps) {
  for (const auto& snapshot : snaps) {
    ForEachSequenceBlock(*snapshot,
                         [&](const void* id, std::size_t bytes) { held.AddBlock(id, bytes); });
  }
}

void ReleaseSnapshots(HeldBlocks& held,
                      const std::vector<std::unique_ptr<SequenceSnapshot>>& snaps) noexcept {
  for (const auto& snapshot : snaps) {
    ForEachSequenceBlock(*snapshot,
                         [&](const void* id, std::size_t /*bytes*/) { held.RemoveBlock(id); });
  }
}

const SequenceNode& Holder(const SequenceNode& node) {
  const SequenceNode* at = &node;
  while (!at->HasSnapshots()) {
    Expects(!at->children.empty());  // a leaf always has snapshots
    at = at->children.front().get();
  }
  return *at;
}

void SplitSequenceNode(SequencePromptState& s, SequenceNode& node, Position at,
                       std::vector<std::unique_ptr<SequenceSnapshot>> first) {
  Expects(node.start < at && at < node.end);
  auto second = std::make_unique<SequenceNode>();
  const auto cut = static_cast<std::ptrdiff_t>(at - node.start);
  second->tokens.assign(node.tokens.begin() + cut, node.tokens.end());
  std::vector<std::unique_ptr<SequenceNode>> only_child;
  only_child.reserve(1);
  HoldSnapshots(s.held, first);
  // Nothing below throws.
  second->start = at;
  second->end = node.end;
  second->last_used = node.last_used;
  second->pinned = node.pinned;
  second->parent = &node;
  second->snapshots = std::move(node.snapshots);
  second->children = std::move(node.children);
  for (auto& grandchild : second->children) grandchild->parent = second.get();
  node.snapshots = std::move(first);
  node.tokens.resize(static_cast<std::size_t>(cut));
  node.end = at;
  only_child.push_back(std::move(second));
  node.children = std::move(only_child);
  ++s.stats.splits;
}

void RecomputePins(SequencePromptState& s) {
  for (SequenceNode* node : TriePreorder(*s.root)) node->pinned = false;
  for (const std::vector<int>& prefix : s.pins) {
    const SequencePath path = WalkTrie(*s.root, prefix);
    for (SequenceNode* node : path.nodes) node->pinned = true;
    if (path.nodes.empty()) continue;
    for (auto* node = const_cast<SequenceNode*>(&Holder(*path.nodes.back()));
         node != path.nodes.back(); node = node->parent) {
      node->pinned = true;
    }
  }
}

void EnforceSequenceBudget(SequencePromptState& s) {
  while (s.held.Bytes() > s.options.byte_budget) {
    SequenceNode* victim = nullptr;
    int victim_depth = 0;
    for (const auto& [node, depth] : TrieWithDepths(*s.root)) {
      if (node->pinned || !node->children.empty()) continue;
      // Least recently used first; among equals the deepest.
      if (victim == nullptr || node->last_used < victim->last_used ||
          (node->last_used == victim->last_used && depth > victim_depth)) {
        victim = node;
        victim_depth = depth;
      }
    }
    if (victim == nullptr) break;  // everything left is pinned (Pin keeps that within budget)
    ReleaseSnapshots(s.held, victim->snapshots);
    SequenceNode& parent = *victim->parent;
    RemoveChild(parent, *victim);
    ++s.stats.evictions;
    Compact(s, parent);
  }
  s.stats.bytes = s.held.Bytes();
  s.stats.nodes = TriePreorder(*s.root).size();
}

std::size_t WalkSequenceBytes(const SequencePromptState& s) {
  HeldBlocks held;
  for (const SequenceNode* node : TriePreorder(*s.root)) HoldSnapshots(held, node->snapshots);
  return held.Bytes();
}

bool CanResumeFrom(const CausalCache& cache, const SequenceSnapshot& snapshot, Position r) {
  if (r == 0) return true;
  const std::vector<Position> positions = snapshot.Positions();
  if (positions.empty() || r > positions.back() + 1) return false;
  const Position window = cache.Options().window;
  if (window == 0) return positions.front() == 0;
  // The reference's CanResume: the window of r lies in what is stored.
  return std::max(0, r - window) >= positions.front();
}

}  // namespace ringkv::detail
