// Lookup: the longest prefix every layer can reach, and bringing the live caches there.
#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>
#include <set>
#include <variant>

#include "prompt_state.h"
#include "ringkv/error.h"

namespace ringkv::detail {
namespace {

// What Lookup knows about the live caches relative to the request.
struct LiveState {
  bool usable = false;  // offsets match live_tokens
  int length = 0;       // L: tokens the caches hold
  int common = 0;       // c: shared prefix of the live tokens and the request
};

LiveState Live(const PromptState& s, std::span<const int> tokens) {
  LiveState live;
  live.usable = s.LiveConsistent();
  if (!live.usable) return live;
  live.length = gsl::narrow<int>(s.live_tokens.size());
  const auto [a, b] =
      std::mismatch(s.live_tokens.begin(), s.live_tokens.end(), tokens.begin(), tokens.end());
  live.common = gsl::narrow<int>(a - s.live_tokens.begin());
  return live;
}

// Can a sliding layer of `window` reach offset x with the live ring?
bool LiveRingReaches(const LiveState& live, int window, int x) {
  if (!live.usable || live.common < x) return false;
  return live.length == x || (live.length <= window && x <= live.length);
}

// A window snapshot on the path that restores offset x exactly: taken at x, or
// taken before the ring wrapped (then any earlier offset is a prefix of it).
const Snapshot* WindowFor(const PromptState& s, const TriePath& path, std::size_t layer, int x) {
  for (const PromptNode* node : path.nodes) {
    const Snapshot* w = node->Layer(layer);
    if (w == nullptr || w->ToOffset() < x) continue;
    if (w->ToOffset() == x || w->ToOffset() <= s.windows[layer]) return w;
  }
  return nullptr;
}

bool AllLayersReach(const PromptState& s, const TriePath& path, const LiveState& live, int x) {
  if (x == 0) return true;
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    // KV layers: the path's spans cover every offset up to the match.
    if (s.windows[i] == 0) continue;
    if (!LiveRingReaches(live, s.windows[i], x) && WindowFor(s, path, i, x) == nullptr) {
      return false;
    }
  }
  return true;
}

// The deepest offset <= limit every layer reaches. Reachable sets are intervals
// [0, e] plus single points, so their tops are among these candidates.
int DeepestReachable(const PromptState& s, const TriePath& path, const LiveState& live, int limit) {
  std::set<int, std::greater<>> candidates = {limit, 0};
  for (const PromptNode* node : path.nodes) {
    if (node->end < limit) candidates.insert(node->end);
  }
  if (live.usable) candidates.insert(std::min({live.common, live.length, limit}));
  for (int x : candidates) {
    if (AllLayersReach(s, path, live, x)) return x;
  }
  return 0;
}

using Layer = LayerCaches::Layer;

Layer RestoredKv(const PromptState& s, const TriePath& path, const LiveState& live, std::size_t i,
                 int q) {
  KVCache fork = dynamic_cast<const KVCache&>(s.caches[i]).Fork();
  const int rewind = live.usable ? std::min(live.common, q) : 0;
  bool ok = fork.Restore(nullptr, rewind);
  for (const PromptNode* node : path.nodes) {
    if (!ok || node->start >= q) break;
    if (node->end <= rewind) continue;
    ok = fork.Restore(node->Layer(i), std::min(node->end, q));
  }
  Ensures(ok && fork.Offset() == q);
  return Layer(std::move(fork));
}

Layer RestoredRing(const PromptState& s, const TriePath& path, const LiveState& live, std::size_t i,
                   int q) {
  RotatingKVCache fork = dynamic_cast<const RotatingKVCache&>(s.caches[i]).Fork();
  bool ok = true;
  if (q == 0) {
    fork.Free();
  } else if (LiveRingReaches(live, s.windows[i], q)) {
    ok = fork.Restore(nullptr, q);
  } else {
    ok = fork.Restore(WindowFor(s, path, i, q), q);
  }
  Ensures(ok && fork.Offset() == q);
  return Layer(std::move(fork));
}

// All layers restored on forks (sharing blocks), then swapped in: all or nothing.
void RestoreLive(PromptState& s, const TriePath& path, const LiveState& live, int q) {
  std::vector<Layer> prepared;
  prepared.reserve(s.Layers());
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    prepared.push_back(s.windows[i] == 0 ? RestoredKv(s, path, live, i, q)
                                         : RestoredRing(s, path, live, i, q));
  }
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    if (auto* kv = std::get_if<KVCache>(&prepared[i])) {
      dynamic_cast<KVCache&>(s.caches[i]).Swap(*kv);
    } else {
      dynamic_cast<RotatingKVCache&>(s.caches[i]).Swap(std::get<RotatingKVCache>(prepared[i]));
    }
  }
}

// Offsets in (q, n) where a window must be captured: path node ends that lack
// one, the point where the request leaves the trie, and for a repeated request
// n - 1 (where the holdback puts the next repeat).
std::vector<int> Checkpoints(const PromptState& s, const TriePath& path, int q, int n) {
  std::set<int> points;
  if (!s.has_windows) return {};
  const int m = path.matched;
  for (const PromptNode* node : path.nodes) {
    if (node->end > q && node->end <= std::min(m, n - 1) && MissingWindows(s, *node) > 0) {
      points.insert(node->end);
    }
  }
  if (m > q && m < n) points.insert(m);
  // A repeated request is held back to n - 1: capture there so the next repeat hits.
  if (m == n && n - 1 > q) points.insert(n - 1);
  return {points.begin(), points.end()};
}

}  // namespace

PrefixMatch LookupAndRestore(PromptState& s, std::span<const int> tokens) {
  if (tokens.empty()) throw Error("[PromptCache::Lookup] tokens must not be empty");
  const int n = gsl::narrow<int>(tokens.size());
  const TriePath path = Walk(*s.root, tokens);
  const LiveState live = Live(s, tokens);
  const int limit = std::min(path.matched, n - 1);  // hold back one token to evaluate
  const int q = DeepestReachable(s, path, live, limit);
  RestoreLive(s, path, live, q);

  // Nothing below throws.
  s.live_tokens.assign(tokens.begin(), tokens.begin() + q);
  for (const auto& [offset, snapshot] : s.pending) s.held.Remove(snapshot.get());
  s.pending.clear();
  s.ForgetLayoutsIfEmpty();
  const std::uint64_t now = s.Tick();
  // Only the node the lookup lands in counts as used: an ancestor passed through
  // keeps its age, so a stale branch point can be compacted into its child.
  for (PromptNode* node : path.nodes) {
    if (node->start < q && q <= node->end) node->last_used = now;
  }
  ++s.stats.lookups;
  if (q > 0) ++s.stats.hits;
  s.stats.tokens_reused += q;
  s.stats.bytes = s.Bytes();
  return PrefixMatch{q, Checkpoints(s, path, q, n)};
}

}  // namespace ringkv::detail
