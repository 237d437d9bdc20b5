#pragma once
// What attention reads for one layer of a multi-sequence forward pass: for each
// batch row, the runs of stored keys/values of its sequence (in position order,
// in place in the cache's blocks) and the range of them the row may see. Rows
// that share a prefix of blocks (after CopyPrefix) name it once, so attention
// reads it once for all of them.
//
// Like KvView it refers to the cache's storage without owning it: valid until
// the next call that changes which tokens the cache holds (StartForward,
// CopyPrefix, Remove, RestoreSequence, ...; Update does not) or its destruction;
// every accessor and the attention entry point throw ringkv::Error on a stale
// history.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/tensor.h"

namespace ringkv {

namespace detail {
struct BatchPlan;    // lib/src/sequence/batch_plan.h
struct BatchAccess;  // the library's access to the internals
}  // namespace detail

class BatchHistory {
 public:
  BatchHistory() = default;  // no rows

  std::int64_t Rows() const;  // N, the batch's tokens
  // The stored dtypes (f32 when empty): one float dtype for both, or both
  // quantized (possibly different, kv_storage.h). Dtype() is KeyDtype().
  DType Dtype() const;
  DType KeyDtype() const;
  DType ValueDtype() const;
  std::int64_t Heads() const;     // Hkv
  std::int64_t KeyDim() const;    // D
  std::int64_t ValueDim() const;  // Dv

  // The keys row r may see, in position order, as contiguous copies
  // [1, Hkv, n, D] / [1, Hkv, n, Dv]: O(n), for tests and tools. A quantized
  // side comes back dequantised as f32 (x = scale * q).
  Tensor VisibleKeys(std::int64_t row) const;
  Tensor VisibleValues(std::int64_t row) const;

 private:
  friend struct detail::BatchAccess;
  std::shared_ptr<const detail::BatchPlan> plan_;
  // Added to every run's k / v pointer: selects the layer inside multi-layer blocks.
  std::ptrdiff_t k_byte_offset_ = 0;
  std::ptrdiff_t v_byte_offset_ = 0;
};

}  // namespace ringkv
