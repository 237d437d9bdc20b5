#include "ringkv/prompt_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>
#include <unordered_set>

#include "json_fields.h"
#include "prompt_state.h"
#include "ringkv/error.h"
#include "trie_node_infos.h"

namespace ringkv {
namespace {

void CheckCaches(const LayerCaches& caches) {
  if (caches.Size() == 0) throw Error("[PromptCache] the caches have no layers");
}

// Files store the fingerprint as a JSON string: it must be valid UTF-8 (checked
// by the JSON library's own rule, so Save can never fail on it).
void CheckFingerprint(const std::string& fingerprint) {
  if (!detail::IsJsonString(fingerprint)) {
    throw Error(fmt::format("[PromptCache] fingerprint (bytes {}) is not valid UTF-8",
                            detail::HexPrefix(fingerprint)));
  }
}

// Throws unless `given` (K/V about to enter the trie) agrees with what it holds.
void CheckLayouts(const char* function, const detail::PromptState& s,
                  const detail::Layouts& given) {
  const int bad = detail::FirstMismatch(given, s.layouts);
  if (bad < 0) return;
  const auto i = static_cast<std::size_t>(bad);
  throw Error(fmt::format(
      "[PromptCache::{}] layer {} holds K/V {}, the cached snapshots {} (Clear() the prompt "
      "cache to change the layout)",
      function, i, detail::LayoutName(*given[i]), detail::LayoutName(*s.layouts[i])));
}

// The sliding layers' windows at the caches' current offset x (Snapshot(x - 1) of
// a ring is its whole window at x), small ones right-sized; null without sliding
// layers.
std::unique_ptr<LayerSnapshot> CaptureWindows(const detail::PromptState& s, int x) {
  if (!s.has_windows || x < 1) return nullptr;
  std::vector<std::unique_ptr<Snapshot>> layers(s.Layers());
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    if (s.windows[i] > 0) layers[i] = s.caches[i].Snapshot(x - 1);
  }
  auto windows = std::make_unique<LayerSnapshot>(std::move(layers));
  detail::CompactSmall(s, windows.get());
  return windows;
}

}  // namespace

PromptCache::PromptCache(LayerCaches& caches, PromptCacheOptions options) {
  CheckCaches(caches);
  CheckFingerprint(options.fingerprint);
  state_ = std::make_unique<detail::PromptState>(caches, std::move(options));
}

PromptCache::~PromptCache() = default;

PrefixMatch PromptCache::Lookup(std::span<const int> tokens) {
  return detail::LookupAndRestore(*state_, tokens);
}

void PromptCache::Prefill(std::span<const int> tokens, const PrefixMatch& match,
                          const std::function<void(std::span<const int>)>& forward) {
  const auto n = tokens.size();
  if (match.reused < 0 || static_cast<std::size_t>(match.reused) >= n) {
    throw Error(
        fmt::format("[PromptCache::Prefill] reused {} must be in [0, {})", match.reused, n));
  }
  auto at = static_cast<std::size_t>(match.reused);
  for (int checkpoint : match.checkpoints) {
    const auto end = static_cast<std::size_t>(checkpoint);
    if (end <= at || end >= n) continue;
    forward(tokens.subspan(at, end - at));
    Checkpoint();
    at = end;
  }
  forward(tokens.subspan(at));
}

void PromptCache::Checkpoint() {
  detail::PromptState& s = *state_;
  const std::vector<int> offsets = s.caches.Offsets();
  if (std::ranges::any_of(offsets, [&](int o) { return o != offsets.front(); })) {
    throw Error("[PromptCache::Checkpoint] the layers are at different offsets");
  }
  const int x = offsets.front();
  std::unique_ptr<LayerSnapshot> windows = CaptureWindows(s, x);
  if (windows == nullptr) return;
  detail::Layouts layouts = detail::LayoutsOf(windows.get(), s.Layers());
  CheckLayouts("Checkpoint", s, layouts);
  detail::MergeLayouts(layouts, s.layouts);
  // Nothing below throws except allocation.
  s.layouts.swap(layouts);
  s.held.Add(windows.get());
  if (auto old = s.pending.find(x); old != s.pending.end()) {
    s.held.Remove(old->second.get());
    s.pending.erase(old);
  }
  s.pending.emplace(x, std::move(windows));
  detail::EnforceBudget(s);
}

void PromptCache::Commit(std::span<const int> tokens) {
  detail::PromptState& s = *state_;
  const int n = gsl::narrow<int>(tokens.size());
  const std::vector<int> offsets = s.caches.Offsets();
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] != n) {
      throw Error(fmt::format("[PromptCache::Commit] layer {} holds {} tokens, {} tokens given", i,
                              offsets[i], n));
    }
  }
  const auto [diff, unused] =
      std::mismatch(s.live_tokens.begin(), s.live_tokens.end(), tokens.begin(), tokens.end());
  if (diff != s.live_tokens.end()) {
    throw Error(fmt::format(
        "[PromptCache::Commit] the tokens differ at {} from the {} tokens the caches were "
        "restored to",
        diff - s.live_tokens.begin(), s.live_tokens.size()));
  }
  if (n == 0) return;
  // Every layer holds tokens, so every layout is known.
  detail::Layouts layouts = detail::CacheLayouts(s.caches);
  CheckLayouts("Commit", s, layouts);

  detail::TriePath path = detail::Walk(*s.root, tokens);
  const int m = path.matched;
  std::unique_ptr<LayerSnapshot> tail = m < n ? s.caches.Snapshot(m) : nullptr;
  detail::CompactSmall(s, tail.get());
  // Nothing below throws except allocation.
  auto take_pending = [&](int x) -> std::unique_ptr<LayerSnapshot> {
    auto it = s.pending.find(x);
    if (it == s.pending.end()) return nullptr;
    std::unique_ptr<LayerSnapshot> w = std::move(it->second);
    s.pending.erase(it);
    return w;
  };
  detail::PromptNode* parent = s.root.get();
  if (!path.nodes.empty()) {
    detail::PromptNode* last = path.nodes.back();
    parent = m < last->end ? &detail::SplitNode(s, *last, m, take_pending(m)) : last;
  }
  if (tail != nullptr) {
    auto leaf = std::make_unique<detail::PromptNode>();
    leaf->tokens.assign(tokens.begin() + m, tokens.end());
    leaf->start = m;
    leaf->end = n;
    leaf->parent = parent;
    s.held.Add(tail.get());
    leaf->snapshot = std::move(tail);
    parent->children.push_back(std::move(leaf));
  }
  // Place the windows captured during prefill: split where one lands mid-edge.
  while (!s.pending.empty()) {
    const int x = s.pending.begin()->first;
    std::unique_ptr<LayerSnapshot> w = take_pending(x);
    if (x >= n) {
      s.held.Remove(w.get());
      continue;
    }
    path = detail::Walk(*s.root, tokens.first(static_cast<std::size_t>(x)));
    detail::PromptNode* node = path.nodes.empty() ? nullptr : path.nodes.back();
    if (node == nullptr || path.matched != x) {
      s.held.Remove(w.get());
    } else if (x < node->end) {
      detail::SplitNode(s, *node, x, std::move(w));
    } else {
      detail::FillWindows(s, *node, std::move(w));
    }
  }
  path = detail::Walk(*s.root, tokens);
  if (detail::PromptNode* end = path.nodes.back(); detail::MissingWindows(s, *end) > 0) {
    // The request ended mid-edge of a cached one: the caches hold its windows now.
    std::unique_ptr<LayerSnapshot> windows = CaptureWindows(s, n);
    s.held.Add(windows.get());
    detail::FillWindows(s, *end, std::move(windows));
  }
  s.live_tokens.assign(tokens.begin(), tokens.end());
  s.layouts.swap(layouts);
  const std::uint64_t now = s.Tick();
  path.nodes.back()->last_used = now;  // the entry this request ends at
  detail::EnforceBudget(s);
}

void PromptCache::Pin(std::span<const int> tokens) {
  detail::PromptState& s = *state_;
  const detail::TriePath path = detail::Walk(*s.root, tokens);
  if (tokens.empty() || path.matched != static_cast<int>(tokens.size())) {
    throw Error(fmt::format("[PromptCache::Pin] only {} of the {} tokens are cached", path.matched,
                            tokens.size()));
  }
  // Upper bound of the blocks pinned after the pin (the last node counted whole).
  detail::HeldBlocks pinned_blocks;
  for (const detail::PromptNode* node : path.nodes) pinned_blocks.Add(node->snapshot.get());
  for (const detail::PromptNode* node : detail::Preorder(*s.root)) {
    if (node->pinned) pinned_blocks.Add(node->snapshot.get());  // counted once per block
  }
  const std::size_t pinned = pinned_blocks.Bytes();
  if (pinned > s.options.byte_budget) {
    throw Error(
        fmt::format("[PromptCache::Pin] pinned snapshots would take {} bytes, over the "
                    "budget of {}",
                    pinned, s.options.byte_budget));
  }
  detail::PromptNode* last = path.nodes.back();
  if (path.matched < last->end) detail::SplitNode(s, *last, path.matched, nullptr);
  for (detail::PromptNode* node : path.nodes) node->pinned = true;
  detail::EnforceBudget(s);
}

void PromptCache::Unpin(std::span<const int> tokens) {
  detail::PromptState& s = *state_;
  const detail::TriePath path = detail::Walk(*s.root, tokens);
  // Unpin from the deepest node up, keeping ancestors of other pinned nodes pinned.
  for (auto it = path.nodes.rbegin(); it != path.nodes.rend(); ++it) {
    detail::PromptNode* node = *it;
    if (node->end > path.matched) continue;
    if (std::ranges::any_of(node->children, [](const auto& c) { return c->pinned; })) break;
    node->pinned = false;
  }
  detail::EnforceBudget(s);
}

void PromptCache::Clear() noexcept {
  detail::PromptState& s = *state_;
  s.root->children.clear();
  s.pending.clear();
  s.held.Clear();
  s.stats.bytes = 0;
  s.stats.nodes = 0;
  s.ForgetLayoutsIfEmpty();
}

PromptCacheStats PromptCache::Stats() const { return state_->stats; }

const PromptCacheOptions& PromptCache::Options() const noexcept { return state_->options; }

std::vector<PromptNodeInfo> PromptCache::Nodes() const {
  const detail::PromptState& s = *state_;
  const std::vector<const detail::PromptNode*> path = detail::ActivePath(s);
  const std::unordered_set<const detail::PromptNode*> active(path.begin(), path.end());
  return detail::TrieNodeInfos(*s.root,
                               [&s, &active](const detail::PromptNode& node, PromptNodeInfo& info) {
                                 info.bytes = node.Bytes();
                                 info.active = active.contains(&node);
                                 info.missing_windows = detail::MissingWindows(s, node);
                               });
}

std::size_t PromptCache::SnapshotBytes() const { return detail::WalkBytes(*state_); }

}  // namespace ringkv
