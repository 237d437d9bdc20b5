#pragma once
// What the pooled prompt cache and the sequence file need of a SequenceSnapshot
// beyond its public surface: the identity of the pool blocks it references (to
// count shared blocks once under a byte budget) and a copy of its K/V (to write
// a file). Defined on the causal cache's internals.

#include <cstddef>
#include <functional>

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

}  // namespace ringkv::detail
