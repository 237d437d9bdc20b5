#pragma once
// How the trie stores snapshots so that small ones stay small. A snapshot of a
// live cache shares its blocks; once the cache writes into a partly filled one,
// the snapshot alone holds that block's old copy: a one-token span, or a window
// of 64 slots, would pin a whole block (256 tokens by default). Snapshots
// shorter than a block are therefore copied into one block of exactly their
// length (a bounded copy); longer KV spans keep sharing whole blocks at the
// cache's block phase (so a Restore shares them again), and the budget counts
// their boundary blocks in full (held_blocks.h).

#include <memory>

#include "ringkv/snapshot.h"

namespace ringkv::detail {

// A right-sized copy of `snapshot` (a KVCache span or a RotatingKVCache window)
// when it holds fewer than block_tokens slots and is not right-sized yet; else
// null (keep `snapshot`).
std::unique_ptr<Snapshot> Compact(const Snapshot& snapshot, std::int64_t block_tokens);

// The span [parent.from, child.to) of two adjacent KVCache spans, in the same
// form: right-sized when short, else in blocks of block_tokens at the cache's
// phase, sharing the child's whole blocks where the phases allow. The inputs are
// untouched. Throws ringkv::SnapshotError when they are not adjacent or differ
// in layout.
std::unique_ptr<Snapshot> MergeSpans(const Snapshot& parent, const Snapshot& child,
                                     std::int64_t block_tokens);

}  // namespace ringkv::detail
