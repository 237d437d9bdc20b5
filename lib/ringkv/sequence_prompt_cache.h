#pragma once
// SequencePromptCache: the prompt cache of a pool of sequences. One token trie
// serves every sequence of one or several CausalCaches (a model with sliding-
// window and global layers has one CausalCache per layer type), so a system
// prompt prefilled once is reused by every slot that starts with it:
//
//   Position r = prompt_cache.Lookup(seq, prompt);  // seq holds prompt[0, r), sharing blocks
//   ... forward prompt[r, n) for seq, sample, decode ...
//   prompt_cache.Commit(seq, tokens_of_seq);         // the trie grows (from any sequence)
//
// Each node holds, per cache, a SequenceSnapshot of a whole sequence [0, end)
// (copy-on-write: it shares its ancestors' blocks, so it costs block
// references, not K/V bytes); a restore shares the snapshot's blocks too (no
// K/V copy). The byte budget counts the distinct pool blocks the trie's
// snapshots reference, each once (docs/prompt_cache.md); least recently used
// unpinned leaves are evicted past it.
//
// Sliding-window caches stay exact: Lookup offers a length r only when every
// cache can resume there from the snapshot it restores (it holds the window of
// r: the reference's CanResume rule), shrinking the match otherwise.
//
// Not thread-safe; call it between forward passes.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ringkv/causal_cache.h"
#include "ringkv/prompt_cache.h"

namespace ringkv {

namespace detail {
struct SequencePromptState;
}

struct SequencePromptCacheOptions {
  // Bytes of pool blocks the trie's snapshots may reference (each block counted
  // once however many snapshots share it). Never exceeded after a call returns.
  std::size_t byte_budget = std::size_t{256} << 20;
};

class SequencePromptCache {
 public:
  // The caches must outlive the prompt cache. Throws ringkv::Error for no
  // caches, a null one, or one listed twice.
  SequencePromptCache(std::span<CausalCache* const> caches, SequencePromptCacheOptions options);
  ~SequencePromptCache();
  SequencePromptCache(const SequencePromptCache&) = delete;
  SequencePromptCache& operator=(const SequencePromptCache&) = delete;

  // Makes `seq` (any id the caches accept; whatever it held is dropped) hold
  // tokens[0, r) for the largest r every cache can resume at, holding back at
  // least one token to evaluate, and returns r (0: seq is empty). Shares the
  // trie's blocks: no K/V is copied and the pool's used blocks do not grow.
  // Throws ringkv::Error, with nothing changed, for empty tokens or when a cache
  // refuses the restore.
  Position Lookup(SequenceId seq, std::span<const int> tokens);
  // `seq` holds the K/V of exactly `tokens` in every cache (its last position is
  // tokens.size() - 1; a global cache holds all of [0, size)): the trie grows
  // to cover them. Throws ringkv::Error, with nothing changed, when it does not.
  void Commit(SequenceId seq, std::span<const int> tokens);

  // Keeps the cached prefix `tokens` (all of it cached) from eviction. Throws
  // ringkv::Error when it is not cached or its blocks exceed the budget.
  void Pin(std::span<const int> tokens);
  void Unpin(std::span<const int> tokens);
  // Drops every node (the sequences are untouched).
  void Clear() noexcept;

  PromptCacheStats Stats() const;
  const SequencePromptCacheOptions& Options() const noexcept;
  // Pre-order, parents before children. `active` is unused (false);
  // `missing_windows` counts the caches without a snapshot at the node's end.
  std::vector<PromptNodeInfo> Nodes() const;
  // Stats().bytes recomputed by walking the trie.
  std::size_t SnapshotBytes() const;

 private:
  std::unique_ptr<detail::SequencePromptState> state_;
};

}  // namespace ringkv
