#include "ringkv/sequence_prompt_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>

#include "ringkv/error.h"
#include "sequence_prompt_state.h"
#include "trie_node_infos.h"

namespace ringkv {
namespace {

using detail::SequenceNode;
using Snapshots = std::vector<std::unique_ptr<SequenceSnapshot>>;

std::vector<CausalCache*> CheckedCaches(std::span<CausalCache* const> caches) {
  if (caches.empty()) throw Error("[SequencePromptCache] caches is empty");
  for (std::size_t i = 0; i < caches.size(); ++i) {
    if (caches[i] == nullptr)
      throw Error(fmt::format("[SequencePromptCache] caches[{}] is null", i));
    for (std::size_t j = 0; j < i; ++j) {
      if (caches[j] == caches[i]) {
        throw Error(
            fmt::format("[SequencePromptCache] caches[{}] and caches[{}] are one cache", j, i));
      }
    }
  }
  return {caches.begin(), caches.end()};
}

Snapshots Capture(const detail::SequencePromptState& s, SequenceId seq, Position len) {
  Snapshots out;
  out.reserve(s.caches.size());
  for (const CausalCache* cache : s.caches) out.push_back(cache->SnapshotSequence(seq, len));
  return out;
}

bool AllResume(const detail::SequencePromptState& s, const Snapshots& snapshots, Position r) {
  for (std::size_t c = 0; c < s.caches.size(); ++c) {
    if (!detail::CanResumeFrom(*s.caches[c], *snapshots[c], r)) return false;
  }
  return true;
}

// Where a lookup lands: the length and the node whose snapshots restore it.
struct Landing {
  Position reused = 0;
  SequenceNode* node = nullptr;          // the path node r falls in (start < r <= end)
  const SequenceNode* source = nullptr;  // Holder(node)
};

// The deepest r <= limit some path node's holder restores in every cache.
// Reachable lengths from one holder form an interval [lo, end] (the resume
// rule), so each path node offers only min(its end, limit).
Landing Land(const detail::SequencePromptState& s, const detail::SequencePath& path,
             Position limit) {
  Landing best;
  for (SequenceNode* node : path.nodes) {
    const Position r = std::min(node->end, limit);
    if (r <= best.reused || r <= node->start) continue;
    const SequenceNode& holder = detail::Holder(*node);
    if (AllResume(s, holder.snapshots, r)) best = Landing{r, node, &holder};
  }
  return best;
}

// Every cache holds seq's tokens at positions ending at n - 1 (all of [0, n)
// in a cache without a window).
void CheckCommit(const detail::SequencePromptState& s, SequenceId seq, std::size_t n) {
  if (n == 0) throw Error("[SequencePromptCache::Commit] tokens must not be empty");
  if (n > static_cast<std::size_t>(kEndOfSequence)) {
    throw Error(fmt::format("[SequencePromptCache::Commit] tokens has {} entries, over {}", n,
                            kEndOfSequence));
  }
  for (std::size_t c = 0; c < s.caches.size(); ++c) {
    const CausalCache& cache = *s.caches[c];
    const std::vector<Position> positions = cache.SequencePositions(seq);
    if (positions.empty()) {
      throw Error(fmt::format("[SequencePromptCache::Commit] seq {} holds no tokens in caches[{}]",
                              seq, c));
    }
    const bool full = cache.Options().window == 0;
    if (static_cast<std::size_t>(positions.back()) + 1 != n ||
        (full && (positions.front() != 0 || positions.size() != n))) {
      throw Error(fmt::format(
          "[SequencePromptCache::Commit] seq {} holds {} tokens at positions [{}, {}] in "
          "caches[{}], but {} tokens were given (positions [0, {}])",
          seq, positions.size(), positions.front(), positions.back(), c, n, n - 1));
    }
  }
}

}  // namespace

SequencePromptCache::SequencePromptCache(std::span<CausalCache* const> caches,
                                         SequencePromptCacheOptions options)
    : state_(std::make_unique<detail::SequencePromptState>(CheckedCaches(caches), options)) {}

SequencePromptCache::~SequencePromptCache() = default;

Position SequencePromptCache::Lookup(SequenceId seq, std::span<const int> tokens) {
  detail::SequencePromptState& s = *state_;
  if (tokens.empty()) throw Error("[SequencePromptCache::Lookup] tokens must not be empty");
  const detail::SequencePath path = detail::WalkTrie(*s.root, tokens);
  // Hold back one token: the caller evaluates at least one, for its logits.
  const Position limit = std::min<Position>(
      path.matched,
      gsl::narrow<Position>(std::min<std::size_t>(tokens.size() - 1, kEndOfSequence)));
  const Landing land = Land(s, path, limit);

  // All caches move or none: each one's state is saved first (sharing blocks).
  std::vector<std::unique_ptr<SequenceCache::State>> saved;
  saved.reserve(s.caches.size());
  for (const CausalCache* cache : s.caches) saved.push_back(cache->SaveState());
  try {
    for (std::size_t c = 0; c < s.caches.size(); ++c) {
      CausalCache& cache = *s.caches[c];
      if (land.source == nullptr) {
        if (!cache.SequencePositions(seq).empty()) cache.Remove(seq, 0, kEndOfSequence);
        continue;
      }
      cache.RestoreSequence(seq, *land.source->snapshots[c]);
      if (land.source->end > land.reused) cache.Remove(seq, land.reused, kEndOfSequence);
    }
  } catch (const Error&) {
    for (std::size_t c = 0; c < s.caches.size(); ++c) s.caches[c]->RestoreState(*saved[c]);
    throw;
  }

  // Nothing below throws.
  const std::uint64_t now = s.Tick();
  if (land.node != nullptr) {
    land.node->last_used = now;
    const_cast<SequenceNode*>(land.source)->last_used = now;
  }
  ++s.stats.lookups;
  if (land.reused > 0) ++s.stats.hits;
  s.stats.tokens_reused += land.reused;
  return land.reused;
}

void SequencePromptCache::Commit(SequenceId seq, std::span<const int> tokens) {
  detail::SequencePromptState& s = *state_;
  CheckCommit(s, seq, tokens.size());
  const auto n = static_cast<Position>(tokens.size());
  const detail::SequencePath path = detail::WalkTrie(*s.root, tokens);
  const Position m = path.matched;
  SequenceNode* last = path.nodes.empty() ? nullptr : path.nodes.back();

  // Everything that can fail first: the snapshots and the leaf.
  Snapshots at_split;  // for the node ending where the request leaves (or ends in) an edge
  Position split = 0;
  if (last != nullptr && m < last->end) {
    split = m;
    at_split = Capture(s, seq, m);
    // A snapshot that cannot restore its own end is useless there.
    if (!AllResume(s, at_split, m)) at_split.clear();
  }
  std::unique_ptr<SequenceNode> leaf;
  if (m < n) {
    leaf = std::make_unique<SequenceNode>();
    leaf->tokens.assign(tokens.begin() + m, tokens.end());
    leaf->start = m;
    leaf->end = n;
    leaf->snapshots = Capture(s, seq, kEndOfSequence);
  }
  Snapshots at_end;  // a branch point that ends exactly at n gets the request's snapshots
  if (m == n && last != nullptr && last->end == n && !last->HasSnapshots()) {
    at_end = Capture(s, seq, kEndOfSequence);
  }

  SequenceNode* parent = last == nullptr ? s.root.get() : last;
  if (split > 0) detail::SplitSequenceNode(s, *last, split, std::move(at_split));
  SequenceNode* end_node = parent;
  if (leaf != nullptr) {
    detail::HoldSnapshots(s.held, leaf->snapshots);
    leaf->parent = parent;
    end_node = leaf.get();
    parent->children.push_back(std::move(leaf));
  } else if (!at_end.empty()) {
    detail::HoldSnapshots(s.held, at_end);
    last->snapshots = std::move(at_end);
  }
  end_node->last_used = s.Tick();
  detail::RecomputePins(s);
  detail::EnforceSequenceBudget(s);
}

void SequencePromptCache::Pin(std::span<const int> tokens) {
  detail::SequencePromptState& s = *state_;
  const detail::SequencePath path = detail::WalkTrie(*s.root, tokens);
  if (tokens.empty() || path.matched != static_cast<int>(tokens.size())) {
    throw Error(fmt::format("[SequencePromptCache::Pin] only {} of the {} tokens are cached",
                            path.matched, tokens.size()));
  }
  std::vector<int> prefix(tokens.begin(), tokens.end());
  const bool added = s.pins.insert(prefix).second;
  detail::RecomputePins(s);
  detail::HeldBlocks pinned;
  for (const SequenceNode* node : detail::TriePreorder(*s.root)) {
    if (node->pinned) detail::HoldSnapshots(pinned, node->snapshots);
  }
  if (pinned.Bytes() > s.options.byte_budget) {
    if (added) s.pins.erase(prefix);
    detail::RecomputePins(s);
    throw Error(fmt::format(
        "[SequencePromptCache::Pin] pinned snapshots would take {} bytes, over the budget of {}",
        pinned.Bytes(), s.options.byte_budget));
  }
}

void SequencePromptCache::Unpin(std::span<const int> tokens) {
  detail::SequencePromptState& s = *state_;
  s.pins.erase(std::vector<int>(tokens.begin(), tokens.end()));
  detail::RecomputePins(s);
  detail::EnforceSequenceBudget(s);
}

void SequencePromptCache::Clear() noexcept {
  detail::SequencePromptState& s = *state_;
  s.root->children.clear();
  s.pins.clear();
  s.held.Clear();
  s.stats.bytes = 0;
  s.stats.nodes = 0;
}

PromptCacheStats SequencePromptCache::Stats() const { return state_->stats; }

const SequencePromptCacheOptions& SequencePromptCache::Options() const noexcept {
  return state_->options;
}

std::vector<PromptNodeInfo> SequencePromptCache::Nodes() const {
  const detail::SequencePromptState& s = *state_;
  return detail::TrieNodeInfos(*s.root, [&s](const SequenceNode& node, PromptNodeInfo& info) {
    for (const auto& snapshot : node.snapshots) info.bytes += snapshot->Size();
    info.missing_windows = node.HasSnapshots() ? 0 : static_cast<int>(s.caches.size());
  });
}

std::size_t SequencePromptCache::SnapshotBytes() const {
  return detail::WalkSequenceBytes(*state_);
}

}  // namespace ringkv
