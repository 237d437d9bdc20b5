#pragma once
// The inside of a BatchHistory: one forward pass's rows, groups, shared
// prefixes and key runs, already in the form kernels::RaggedSdpa reads, so the
// attention entry point hands them over without rebuilding anything per layer.
// A multi-sequence cache builds one plan per StartForward (its runs point at
// layer 0 of its multi-layer blocks); each layer's history adds that layer's
// byte offsets. Private to lib/ (and its tests).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ringkv/batch_history.h"
#include "ringkv/dtype.h"
#include "ringkv/kernels/ragged_sdpa.h"

namespace ringkv::detail {

struct ViewEpoch;  // block_store.h: a generation counter that outlives its owner

struct BatchPlan {
  // The stored dtypes: one float dtype for both, or both quantized (the runs'
  // strides then count bytes).
  DType key_dtype = DType::kF32;
  DType value_dtype = DType::kF32;
  std::int64_t rows = 0;  // N
  std::int64_t heads = 0;
  std::int64_t key_dim = 0;
  std::int64_t value_dim = 0;

  std::vector<kernels::RaggedRun> runs;
  std::vector<kernels::RaggedPrefix> prefixes;
  std::vector<kernels::RaggedGroup> groups;
  std::vector<std::int64_t> group_rows;  // RaggedSdpaParams::rows
  std::vector<std::int64_t> row_lo;      // per row, N entries
  std::vector<std::int64_t> row_hi;

  // The owner's generation when the plan was built; a changed value means the
  // runs may point at released or rewritten blocks.
  std::shared_ptr<const ViewEpoch> epoch;
  std::uint64_t generation = 0;
  // Keeps alive the storage the runs point at, for an owner that replaces
  // storage rather than rewriting it in place (EncoderCache); null otherwise.
  std::shared_ptr<const void> storage;
};

struct BatchAccess {
  static BatchHistory Make(std::shared_ptr<const BatchPlan> plan, std::ptrdiff_t k_byte_offset,
                           std::ptrdiff_t v_byte_offset) {
    BatchHistory history;
    history.plan_ = std::move(plan);
    history.k_byte_offset_ = k_byte_offset;
    history.v_byte_offset_ = v_byte_offset;
    return history;
  }
  // The plan, after checking it is current: throws ringkv::Error naming
  // `function` when its owner changed since it was built. Null for an empty history.
  static const BatchPlan* Current(const BatchHistory& history, const char* function);
  static std::ptrdiff_t KeyOffset(const BatchHistory& h) noexcept { return h.k_byte_offset_; }
  static std::ptrdiff_t ValueOffset(const BatchHistory& h) noexcept { return h.v_byte_offset_; }
};

}  // namespace ringkv::detail
