#pragma once
// Scores of a prefill-sized tile from its block's keys laid out key-major: the
// block's K transposed once into scratch (column c holds value c of every key),
// so that q . k becomes an outer product. Each step loads a few vectors of
// keys' values at one position c, broadcasts q_r[c] for a few rows and adds the
// products into accumulators that hold one score per lane: no horizontal sums,
// where a row-major tile must reduce each (row, key) accumulator across its
// lanes after only D / lanes multiply-adds. The transposition costs a few
// shuffles per value once per block and tile, against the tile's rows x D
// multiply-adds per key. Decode tiles (a few rows) keep the row-major dots:
// there a transposition would cost as much as the products it serves.
// Internal linkage, see simd_compat-inl.h.
#include <cstdint>

#include "row_tiles-inl.h"
#include "simd_compat-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch>
struct KeyMajor {
  using B = FloatBatch<Arch>;
  static constexpr std::int64_t kN = static_cast<std::int64_t>(B::size);
  // Register tiles: kRows rows x kCols vectors of keys. AVX-512 (32
  // registers): 6 x 4 accumulators + 4 key vectors + 1 broadcast; AVX2 and
  // SSE4.2 (16): 6 x 2 + 2 + 1, and NEON, with 4 lanes like SSE4.2, the same.
  static constexpr int kRows = 6;
  static constexpr int kCols = kN == 16 ? 4 : 2;

  // Keys of a block rounded up to whole vectors: the columns' length.
  static std::int64_t PaddedKeys(std::int64_t kb) { return (kb + kN - 1) / kN * kN; }

  // kt[c * kt_stride + j] = key j's value c as f32, for j < kb, and 0 for the
  // padding keys up to PaddedKeys(kb) (<= kt_stride). row(j, c) gives key j's
  // values c .. c + kN - 1 (c a multiple of kN), scalar(j, c) one value, for the
  // last d % kN.
  template <class Row, class Scalar>
  __attribute__((always_inline)) static void ToColumns(std::int64_t kb, std::int64_t d, float* kt,
                                                       std::int64_t kt_stride, const Row& row,
                                                       const Scalar& scalar) {
    const std::int64_t d_vec = d - d % kN;
    const std::int64_t kb_pad = PaddedKeys(kb);
    for (std::int64_t j0 = 0; j0 < kb_pad; j0 += kN) {
      const std::int64_t present = kb - j0 < kN ? kb - j0 : kN;
      for (std::int64_t c = 0; c < d_vec; c += kN) {
        B square[static_cast<std::size_t>(kN)];
#pragma GCC unroll 16
        for (std::int64_t i = 0; i < kN; ++i) square[i] = i < present ? row(j0 + i, c) : B(0.0f);
        Transpose<Arch>(square);
#pragma GCC unroll 16
        for (std::int64_t i = 0; i < kN; ++i) {
          square[i].store_unaligned(kt + (c + i) * kt_stride + j0);
        }
      }
      for (std::int64_t c = d_vec; c < d; ++c) {
        for (std::int64_t i = 0; i < kN; ++i) {
          kt[c * kt_stride + j0 + i] = i < present ? scalar(j0 + i, c) : 0.0f;
        }
      }
    }
  }

  // ToColumns of kb rows of Tag values, k_stride apart.
  template <class Tag>
  static void ToColumns(const typename Tag::Stored* k, std::int64_t k_stride, std::int64_t kb,
                        std::int64_t d, float* kt, std::int64_t kt_stride) {
    ToColumns(
        kb, d, kt, kt_stride,
        [&](std::int64_t j, std::int64_t c) {
          return LoadAsFloat<Arch, Tag>(k + j * k_stride + c);
        },
        [&](std::int64_t j, std::int64_t c) {
          return LoadScalarAsFloat<Tag>(k + j * k_stride + c);
        });
  }

  // out[r * out_stride + x * kN + lane] = q_r . k_(x kN + lane) for R rows and
  // C vectors of keys from kt (the block's columns, at the tile's first key).
  template <int R, int C>
  __attribute__((always_inline)) static void Dots(const float* q, std::int64_t q_stride,
                                                  const float* kt, std::int64_t kt_stride,
                                                  std::int64_t d, float* out,
                                                  std::int64_t out_stride) {
    B acc[static_cast<std::size_t>(R * C)];
#pragma GCC unroll 32
    for (int a = 0; a < R * C; ++a) acc[a] = B(0.0f);
    for (std::int64_t c = 0; c < d; ++c) {
      const float* column = kt + c * kt_stride;
      B kv[static_cast<std::size_t>(C)];
#pragma GCC unroll 8
      for (int x = 0; x < C; ++x) kv[x] = B::load_unaligned(column + x * kN);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const B qv(q[r * q_stride + c]);
#pragma GCC unroll 8
        for (int x = 0; x < C; ++x) acc[r * C + x] = xsimd::fma(qv, kv[x], acc[r * C + x]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int x = 0; x < C; ++x) acc[r * C + x].store_unaligned(out + r * out_stride + x * kN);
    }
  }

  // s[r * s_stride + j] = qs_r . k_j for every row of the tile and every key of
  // the block up to PaddedKeys(kb) (the padding keys score 0; the softmax
  // masks them).
  static void Scores(std::int64_t rows_total, const float* qs, std::int64_t qd, const float* kt,
                     std::int64_t kt_stride, std::int64_t kb, std::int64_t d, float* s,
                     std::int64_t s_stride) {
    const std::int64_t kb_pad = PaddedKeys(kb);
    ForEachRowTile<kRows, kCols, kCols, 1>(rows_total, 0, [&]<int R, int C>(std::int64_t r) {
      const float* q = qs + r * qd;
      float* out = s + r * s_stride;
      std::int64_t j = 0;
      for (; j + C * kN <= kb_pad; j += C * kN) {
        Dots<R, C>(q, qd, kt + j, kt_stride, d, out + j, s_stride);
      }
      for (; j < kb_pad; j += kN) Dots<R, 1>(q, qd, kt + j, kt_stride, d, out + j, s_stride);
    });
  }
};

}  // namespace
}  // namespace ringkv::kernels
