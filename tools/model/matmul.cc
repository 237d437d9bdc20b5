#include "matmul.h"

#include <algorithm>
#include <cstring>
#include <gsl/assert>
#include <gsl/narrow>

namespace ringkv::model {
namespace {

constexpr int kLanes = 8;                // floats per accumulator vector
constexpr std::size_t kTileRows = 2;     // x rows per register tile
constexpr std::size_t kTileOuts = 4;     // w rows per register tile
constexpr std::int64_t kBlockRows = 64;  // x rows per task: reuses one w block from L2
constexpr std::int64_t kBlockOuts = 32;  // w rows per task: 32 x 512 floats = 64 KiB
constexpr std::int64_t kInlineMacs = std::int64_t{1} << 16;

// GCC/Clang vector extension: compiled to two SSE registers on the baseline and to
// one ymm register in the x86-64-v3 clone below.
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

// The fixed reduction of one accumulator: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
[[gnu::always_inline]] inline float Reduce(const Vec& v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// y[r, o] for R x rows and C w rows. The tail of k (n % kLanes) goes through lane
// 0 element by element, in k order, the same for every tile shape.
template <std::size_t R, std::size_t C>
[[gnu::always_inline]] inline void Tile(const float* const* x, const float* const* w,
                                        std::int64_t n, float* const* y, std::int64_t y_col,
                                        bool add) {
  Vec acc[R][C] = {};
  std::int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    Vec wv[C];  // unaligned loads: memcpy compiles to one vector load
#pragma GCC unroll 4
    for (std::size_t c = 0; c < C; ++c) std::memcpy(&wv[c], w[c] + k, sizeof(Vec));
#pragma GCC unroll 4
    for (std::size_t r = 0; r < R; ++r) {
      Vec xv;
      std::memcpy(&xv, x[r] + k, sizeof(Vec));
#pragma GCC unroll 4
      for (std::size_t c = 0; c < C; ++c) acc[r][c] += xv * wv[c];
    }
  }
  for (; k < n; ++k) {
    for (std::size_t r = 0; r < R; ++r) {
      for (std::size_t c = 0; c < C; ++c) acc[r][c][0] += x[r][k] * w[c][k];
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t c = 0; c < C; ++c) {
      const float value = Reduce(acc[r][c]);
      float& out = y[r][y_col + static_cast<std::int64_t>(c)];
      out = add ? out + value : value;
    }
  }
}

template <std::size_t R>
[[gnu::always_inline]] inline void RowTile(const float* const* x_rows, const Matrix& w,
                                           std::int64_t out_begin, std::int64_t out_end,
                                           float* const* y_rows, bool add) {
  const std::int64_t n = w.cols;
  std::int64_t o = out_begin;
  constexpr auto kOuts = static_cast<std::int64_t>(kTileOuts);
  for (; o + kOuts <= out_end; o += kOuts) {
    const float* w_rows[kTileOuts];
    for (std::size_t c = 0; c < kTileOuts; ++c) {
      w_rows[c] = w.data.data() + (o + static_cast<std::int64_t>(c)) * n;
    }
    Tile<R, kTileOuts>(x_rows, w_rows, n, y_rows, o, add);
  }
  for (; o < out_end; ++o) {
    const float* w_row = w.data.data() + o * n;
    Tile<R, 1>(x_rows, &w_row, n, y_rows, o, add);
  }
}

// One task: x rows [row_begin, row_end) against w rows [out_begin, out_end). Cloned
// for x86-64-v3 (AVX2) with an ifunc resolver; both clones do the same IEEE
// operations (CMakeLists.txt builds this file with -ffp-contract=off: no FMA
// contraction that could differ between tile shapes), so the result never depends
// on `rows`. On Zen 3 separate multiply and add issue on separate pipes, so
// contraction would not be faster anyway. Under ThreadSanitizer only the default
// clone exists: the loader runs the instrumented ifunc resolver before the TSan
// runtime is up, which crashes every binary at start-up. Off x86-64 (AArch64:
// Advanced SIMD is baseline) there is only the default build.
#if !defined(__x86_64__)
#define RINGKV_MATMUL_CLONES
#elif defined(__SANITIZE_THREAD__)
#define RINGKV_MATMUL_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RINGKV_MATMUL_CLONES
#endif
#endif
#ifndef RINGKV_MATMUL_CLONES
#define RINGKV_MATMUL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
RINGKV_MATMUL_CLONES void Block(const float* x, std::int64_t row_begin, std::int64_t row_end,
                                const Matrix& w, std::int64_t out_begin, std::int64_t out_end,
                                float* y, bool add) {
  const std::int64_t n = w.cols, out = w.rows;
  std::int64_t r = row_begin;
  constexpr auto kRows = static_cast<std::int64_t>(kTileRows);
  for (; r + kRows <= row_end; r += kRows) {
    const float* x_rows[kTileRows];
    float* y_rows[kTileRows];
    for (std::size_t i = 0; i < kTileRows; ++i) {
      const std::int64_t row = r + static_cast<std::int64_t>(i);
      x_rows[i] = x + row * n;
      y_rows[i] = y + row * out;
    }
    RowTile<kTileRows>(x_rows, w, out_begin, out_end, y_rows, add);
  }
  for (; r < row_end; ++r) {
    const float* x_row = x + r * n;
    float* y_row = y + r * out;
    RowTile<1>(&x_row, w, out_begin, out_end, &y_row, add);
  }
}

}  // namespace

void MatMul(std::span<const float> x, std::int64_t rows, const Matrix& w, std::span<float> y,
            kernels::Executor& pool, Accumulate mode) {
  Expects(rows >= 0 && w.rows >= 1 && w.cols >= 1);
  Expects(w.data.size() == gsl::narrow<std::size_t>(w.rows * w.cols));
  Expects(x.size() == gsl::narrow<std::size_t>(rows * w.cols));
  Expects(y.size() == gsl::narrow<std::size_t>(rows * w.rows));
  if (rows == 0) return;
  // Decode (one row) splits the outputs finer so both threads get work.
  const std::int64_t block_outs =
      rows < static_cast<std::int64_t>(kTileRows) ? kBlockOuts / 2 : kBlockOuts;
  const std::int64_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  const std::int64_t out_blocks = (w.rows + block_outs - 1) / block_outs;
  const bool add = mode == Accumulate::kAdd;
  // Below ~64k multiply-adds a hand-over to the pool costs more than the work.
  if (rows * w.rows * w.cols < kInlineMacs) {
    Block(x.data(), 0, rows, w, 0, w.rows, y.data(), add);
    return;
  }
  pool.Run(gsl::narrow<std::size_t>(row_blocks * out_blocks), [&](std::size_t task, int) {
    const std::int64_t t = gsl::narrow_cast<std::int64_t>(task);
    const std::int64_t rb = t / out_blocks, ob = t % out_blocks;
    Block(x.data(), rb * kBlockRows, std::min(rows, (rb + 1) * kBlockRows), w, ob * block_outs,
          std::min(w.rows, (ob + 1) * block_outs), y.data(), add);
  });
}

}  // namespace ringkv::model
