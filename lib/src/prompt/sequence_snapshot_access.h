#pragma once
// What the pooled prompt cache and the sequence file need of a SequenceSnapshot
// beyond its public surface: the identity of the pool blocks it references (to
// count shared blocks once under a byte budget), a copy of its K/V (to write a
// file) and, for quantized pools, a snapshot made from a file's stored rows.
// Defined on the causal cache's internals.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ringkv/causal_cache.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// Calls fn(id, bytes) once per pool block the snapshot references; snapshots
// sharing a block pass the same id.
void ForEachSequenceBlock(const SequenceSnapshot& snapshot,
                          const std::function<void(const void*, std::size_t)>& fn);

// Contiguous copies of layer `layer`'s stored K/V rows, token i at
// Positions()[i]: [1, Hkv, Tokens(), D] and [1, Hkv, Tokens(), Dv] of a float
// pool's dtype, or a quantized pool's carrier rows (stored_rows.h).
Tensor SequenceKeys(const SequenceSnapshot& snapshot, int layer);
Tensor SequenceValues(const SequenceSnapshot& snapshot, int layer);

// A quantized pool's stored rows of one side of layer `layer`, packed
// [Hkv, Tokens(), RowBytes(dtype, dim)] without the blocks' padding, as a file holds them.
std::vector<std::byte> PackedSequenceRows(const SequenceSnapshot& snapshot, int layer, bool keys);

// The inverse, for a quantized pool: a snapshot in a pool of its own, laid out
// as a CausalCache with `options` lays out its blocks, holding `positions`
// (ascending) with these packed rows per layer (their sizes checked by the
// caller), bit for bit. RestoreSequence copies it into a cache as bits.
std::unique_ptr<SequenceSnapshot> SequenceFromRows(const CausalCacheOptions& options,
                                                   std::span<const Position> positions,
                                                   std::span<const std::vector<std::byte>> keys,
                                                   std::span<const std::vector<std::byte>> values);

}  // namespace ringkv::detail
