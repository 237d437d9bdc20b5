#pragma once
// How the trie stores snapshots so that small ones stay small. A snapshot of a
// live cache shares its blocks; once the cache writes into a partly filled one,
// the snapshot alone holds that block's old copy: a one-token span, or a window
// of 64 slots, would pin a whole block (256 tokens by default).
// - A KV span shorter than a block is copied into one block of exactly its
//   length (a bounded copy; a Restore copies it back into the cache's blocks).
//   Longer spans keep sharing whole blocks at the cache's block phase (so a
//   Restore shares them again); the budget counts their boundary blocks in full.
// - A window of a ring smaller than a block is copied into blocks of the
//   window's size: a ring restored from it adopts its store (and block size),
//   and w rows is the natural block for a ring of w (never smaller).

#include <memory>

#include "ringkv/snapshot.h"

namespace ringkv::detail {

// The compact copy of `snapshot` described above (`window` 0 for a KVCache
// span), or null when it is compact already (keep `snapshot`).
std::unique_ptr<Snapshot> Compact(const Snapshot& snapshot, std::int64_t block_tokens, int window);
// Bytes of the blocks a snapshot of `slots` slots holds once compact, if its
// store had blocks of block_tokens starting at row `phase`.
std::size_t CompactBytes(std::int64_t slots, std::int64_t phase, std::int64_t block_tokens,
                         int window, std::size_t bytes_per_token);

// The span [parent.from, child.to) of two adjacent KVCache spans, in the same
// form: right-sized when short, else in blocks of block_tokens at the cache's
// phase, sharing the child's whole blocks where the phases allow. The inputs are
// untouched. Throws ringkv::SnapshotError when they are not adjacent or differ
// in layout.
std::unique_ptr<Snapshot> MergeSpans(const Snapshot& parent, const Snapshot& child,
                                     std::int64_t block_tokens);

}  // namespace ringkv::detail
