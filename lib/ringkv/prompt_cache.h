#pragma once
// PromptCache: skips re-prefilling token prefixes the model has already seen.
//
// A compressed token trie (radix tree) of snapshots under a byte budget. Each node
// holds an edge of token ids covering offsets [start, end), and per layer a
// snapshot of exactly its own span: the K/V of tokens [start, end) for a KVCache
// layer, the whole window at offset `end` for a RotatingKVCache layer (possibly
// missing, see below). One path from the root, the active path, is what the live
// caches hold. docs/prompt_cache.md has the rules; the decode loop is:
//
//   PrefixMatch m = prompt_cache.Lookup(prompt);        // caches now hold prompt[0, m.reused)
//   prompt_cache.Prefill(prompt, m, forward);           // evaluates the rest, in chunks
//   ... sample, decode ...
//   prompt_cache.Commit(tokens_in_the_caches);          // the trie grows
//
// Sliding-window layers are exact: a wrapped ring cannot rewind, so Lookup never
// reports a prefix that some layer cannot really reach (it shrinks the match),
// and asks the caller to stop prefill at the offsets future lookups will need
// (PrefixMatch::checkpoints), where Checkpoint() captures the windows.
//
// Not thread-safe; one PromptCache drives one LayerCaches.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ringkv/layer_caches.h"

namespace ringkv {

namespace detail {
struct PromptState;
}

// The K/V layout (dtype, kv heads, key and value dims) is not an option: it is
// taken from the caches, per layer, at the first Commit (or Load), and every later
// Commit, Checkpoint and Load must match it while the trie holds anything.
struct PromptCacheOptions {
  // Bytes of storage the trie may hold: the blocks its snapshots (nodes and
  // pending checkpoints) reference, each counted once however many share it.
  // Never exceeded after a call returns; loading a file stays within it too.
  std::size_t byte_budget = std::size_t{256} << 20;
  // Identifies the model (weights, tokenizer, K/V dtype); written to files and
  // checked on load. Must be valid UTF-8 (else the constructor throws).
  std::string fingerprint;
};

struct PromptCacheStats {
  std::int64_t lookups = 0;
  std::int64_t hits = 0;           // lookups that reused at least one token
  std::int64_t tokens_reused = 0;  // prefill skipped, summed over lookups
  std::int64_t evictions = 0;      // nodes removed or merged into their child
  std::int64_t merges = 0;         // of those, the ones merged into their only child
  std::int64_t splits = 0;
  std::size_t bytes = 0;  // held now: blocks of nodes and pending checkpoints, see byte_budget
  std::size_t nodes = 0;  // excluding the root
};

struct PrefixMatch {
  int reused = 0;  // the caches hold tokens[0, reused); evaluate from there
  // Ascending offsets in (reused, tokens.size()) where prefill should stop and
  // call Checkpoint() (Prefill() does it): sliding-window states needed later.
  std::vector<int> checkpoints;
};

// A read-only picture of one trie node, for tests and tools.
struct PromptNodeInfo {
  int parent = -1;  // index into the Nodes() vector, -1 for children of the root
  int start = 0;
  int end = 0;
  std::vector<int> tokens;  // the edge: tokens [start, end)
  std::size_t bytes = 0;    // Σ Snapshot::Size() of its layers (the K/V it covers)
  std::uint64_t last_used = 0;
  bool pinned = false;
  bool active = false;      // on the path the live caches hold
  int missing_windows = 0;  // sliding layers without a window at `end`
};

class PromptCache {
 public:
  // `caches` must outlive the prompt cache and change only through it (or by
  // the caller's forward passes between Lookup and Commit).
  PromptCache(LayerCaches& caches, PromptCacheOptions options);
  ~PromptCache();
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // Brings the caches to the longest cached prefix of `tokens` that every layer
  // can reach, holding back at least one token. Throws ringkv::Error for empty tokens.
  PrefixMatch Lookup(std::span<const int> tokens);
  // Runs forward(chunk) over tokens[match.reused, size), in chunks that end at the
  // checkpoints, calling Checkpoint() at each; the last chunk ends at size.
  void Prefill(std::span<const int> tokens, const PrefixMatch& match,
               const std::function<void(std::span<const int>)>& forward);
  // Captures the sliding-window layers at the caches' current offset.
  void Checkpoint();
  // The caches now hold exactly `tokens` (every layer's offset is tokens.size(),
  // and they extend what Lookup restored): the trie grows to cover them. Any int
  // is a token id. Throws ringkv::Error, with nothing changed, when the caches
  // hold K/V of another layout than the trie's snapshots.
  void Commit(std::span<const int> tokens);

  // Keeps the cached prefix `tokens` (all of it must be cached) from eviction.
  // Throws ringkv::Error when it is not cached or would not fit in the budget.
  void Pin(std::span<const int> tokens);
  void Unpin(std::span<const int> tokens);
  // Drops every node and pending checkpoint (the live caches are untouched).
  void Clear() noexcept;

  // Writes the whole trie, or the cached path of `tokens`, atomically (temp file
  // in the same directory, fsync, rename; the replaced file's mode is kept and
  // stale temporaries of killed saves removed). Throws ringkv::Error on I/O
  // failure, or when the header would be over the limit Load accepts.
  void Save(const std::string& path) const;
  void SaveEntry(const std::string& path, std::span<const int> tokens) const;
  // Replaces the trie with a file's contents after validating all of it, keeping
  // the pinned nodes and then the most recently used ones that fit the budget;
  // on any problem throws ringkv::SnapshotError naming it, with nothing changed.
  // Load reads regular files only. docs/prompt_cache.md has the limits.
  void Load(const std::string& path);
  void LoadFromMemory(std::span<const std::byte> file);

  PromptCacheStats Stats() const;
  const PromptCacheOptions& Options() const noexcept;
  // Pre-order, parents before children.
  std::vector<PromptNodeInfo> Nodes() const;
  // Stats().bytes recomputed by walking the trie (Stats().bytes is kept incrementally).
  std::size_t SnapshotBytes() const;

 private:
  std::unique_ptr<detail::PromptState> state_;
};

}  // namespace ringkv
