#pragma once
// y = x · Wᵀ for the model's projections: x [rows, in] and W [out, in] row-major
// f32, so one output is a dot product of two contiguous rows. Multi-threaded over
// tiles of (rows, outputs) on the caller's pool.
//
// Determinism the tests rely on: every output element is computed by the same
// sequence of operations whatever `rows` is (fixed lanes, fixed k order, fixed
// reduction tree, no FP contraction), so one token processed alone (decode) and
// the same token inside a 500-token prefill give bit-identical projections.

#include <cstdint>
#include <span>
#include <vector>

#include "ringkv/kernels/executor.h"

namespace ringkv::model {

struct Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<float> data;  // [rows, cols]
};

enum class Accumulate : std::uint8_t { kOverwrite, kAdd };

// y [rows, w.rows] = (mode == kAdd ? y : 0) + x [rows, w.cols] · wᵀ. Spans must hold
// exactly those sizes (GSL Expects).
void MatMul(std::span<const float> x, std::int64_t rows, const Matrix& w, std::span<float> y,
            kernels::Executor& pool, Accumulate mode = Accumulate::kOverwrite);

}  // namespace ringkv::model
