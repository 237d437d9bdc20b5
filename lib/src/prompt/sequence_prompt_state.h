#pragma once
// The pooled prompt cache's trie and bookkeeping (private). See
// ringkv/sequence_prompt_cache.h and docs/prompt_cache.md.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "held_blocks.h"
#include "ringkv/sequence_prompt_cache.h"
#include "token_trie.h"

namespace ringkv::detail {

struct SequenceNode {
  SequenceNode() = default;
  ~SequenceNode() { DestroySubtrees(std::move(children)); }
  SequenceNode(const SequenceNode&) = delete;
  SequenceNode& operator=(const SequenceNode&) = delete;

  std::vector<int> tokens;  // the edge; tokens.size() == end - start (root: empty)
  Position start = 0;
  Position end = 0;
  // One per cache, each of a whole sequence [0, end) (a sliding-window cache's
  // retained tokens only), or empty: a branch point whose prefix only its
  // descendants' snapshots hold. A leaf always has them.
  std::vector<std::unique_ptr<SequenceSnapshot>> snapshots;
  std::uint64_t last_used = 0;
  bool pinned = false;  // recomputed from SequencePromptState::pins
  SequenceNode* parent = nullptr;
  std::vector<std::unique_ptr<SequenceNode>> children;

  bool HasSnapshots() const noexcept { return !snapshots.empty(); }
};

using SequencePath = TriePathOf<SequenceNode>;

struct SequencePromptState {
  SequencePromptState(std::vector<CausalCache*> c, SequencePromptCacheOptions o);

  std::vector<CausalCache*> caches;
  SequencePromptCacheOptions options;
  std::unique_ptr<SequenceNode> root;
  std::uint64_t clock = 0;
  HeldBlocks held;  // the blocks of every node's snapshots
  PromptCacheStats stats;
  std::set<std::vector<int>> pins;  // the prefixes Pin was given

  std::uint64_t Tick() noexcept { return ++clock; }
};

// sequence_prompt_trie.cc
void HoldSnapshots(HeldBlocks& held, const std::vector<std::unique_ptr<SequenceSnapshot>>& snaps);
void ReleaseSnapshots(HeldBlocks& held,
                      const std::vector<std::unique_ptr<SequenceSnapshot>>& snaps) noexcept;
// The node whose snapshots hold `node`'s prefix: itself, or the first
// descendant with snapshots along first children.
const SequenceNode& Holder(const SequenceNode& node);
// Divides `node` at `at` (start < at < end): node keeps [start, at) with
// `first` (possibly empty), a new only child takes [at, end) with node's
// snapshots and children. Allocates before it changes anything.
void SplitSequenceNode(SequencePromptState& s, SequenceNode& node, Position at,
                       std::vector<std::unique_ptr<SequenceSnapshot>> first);
// Marks the nodes the pinned prefixes need: their paths and, where a path ends
// at a branch point, its holder chain.
void RecomputePins(SequencePromptState& s);
// Evicts least recently used unpinned leaves until the held bytes fit the budget.
void EnforceSequenceBudget(SequencePromptState& s);
std::size_t WalkSequenceBytes(const SequencePromptState& s);

// Whether a cache can resume at r from `snapshot` truncated to r (the
// reference's CanResume rule on the snapshot's positions; r <= its end).
bool CanResumeFrom(const CausalCache& cache, const SequenceSnapshot& snapshot, Position r);

}  // namespace ringkv::detail
