#pragma once
// The kI4H rotation (dtype.h) and its rows. Internal linkage: every per-ISA
// unit compiles its own copy with its own instructions (docs/kernels.md).
//
// A kI4H row of n values is n / b independent blocks (b = I4HBlock(n)), each the
// kI4 row of its rotated block with its nibbles and scales moved into the row's
// data and scale areas. So a tier's kI4 quantizer and dequantizer do the work,
// one block at a time, through a small stack buffer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ringkv/kernels/dtype.h"

namespace ringkv::kernels {
namespace {

constexpr auto kRotBlockMax = static_cast<std::size_t>(kI4HBlockMax);

// One butterfly pass over two disjoint runs of h values: (lo, hi) <- (lo + hi,
// lo - hi). restrict lets the compiler vectorise it.
inline void Butterflies(float* __restrict lo, float* __restrict hi, std::size_t h) noexcept {
  for (std::size_t j = 0; j < h; ++j) {
    const float a = lo[j];
    const float c = hi[j];
    lo[j] = a + c;
    hi[j] = a - c;
  }
}

// x[0, b) <- H_b x / sqrt(b), b a power of two >= 8: log2(b) butterfly passes
// (h = 1, 2, 4 within each run of 8 values, in registers, then h = 8, 16, ...
// over whole runs), then one multiply. Every pass computes the same sums in the
// same order on every tier, so the tiers agree to the bit. The transform is its
// own inverse.
inline void RotateBlock(float* x, std::size_t b) noexcept {
  for (std::size_t i = 0; i < b; i += 8) {
    float* v = x + i;
    const float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
    const float a4 = v[4] + v[5], a5 = v[4] - v[5], a6 = v[6] + v[7], a7 = v[6] - v[7];
    const float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
    const float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
    v[0] = b0 + b4;
    v[1] = b1 + b5;
    v[2] = b2 + b6;
    v[3] = b3 + b7;
    v[4] = b0 - b4;
    v[5] = b1 - b5;
    v[6] = b2 - b6;
    v[7] = b3 - b7;
  }
  for (std::size_t h = 8; h < b; h *= 2) {
    for (std::size_t i = 0; i < b; i += 2 * h) Butterflies(x + i, x + i + h, h);
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(b));
  for (std::size_t i = 0; i < b; ++i) x[i] *= norm;
}

// Every block of x[0, n) rotated in place (n % kI4Group == 0).
inline void RotateRow(float* x, std::size_t n) noexcept {
  const auto b = static_cast<std::size_t>(I4HBlock(static_cast<std::int64_t>(n)));
  for (std::size_t o = 0; o < n; o += b) RotateBlock(x + o, b);
}

// Quantizes one row of n values into RowBytes(kI4H, n) bytes at `out`.
// load(o, b, x) writes values [o, o + b) of the source row as f32 to x;
// quantize(x, b, row) writes the kI4 row of x[0, b) (RowBytes(kI4, b) bytes).
template <class Load, class QuantizeI4>
void QuantizeRotatedRow(Load load, QuantizeI4 quantize, std::size_t n, std::uint8_t* out) {
  constexpr auto kGroup = static_cast<std::size_t>(kI4Group);
  const auto b = static_cast<std::size_t>(I4HBlock(static_cast<std::int64_t>(n)));
  alignas(64) float x[kRotBlockMax];
  alignas(64) std::uint8_t row[kRotBlockMax / 2 + kRotBlockMax / kGroup * 4];
  for (std::size_t o = 0; o < n; o += b) {
    load(o, b, x);
    RotateBlock(x, b);
    quantize(x, b, row);
    std::memcpy(out + o / 2, row, b / 2);
    std::memcpy(out + n / 2 + o / kGroup * 4, row + b / 2, b / kGroup * 4);
  }
}

// Dequantizes the RowBytes(kI4H, n) bytes at `in`, rotated back.
// dequantize(row, b, x) writes the f32 values of a kI4 row of b values to x;
// store(o, b, x) writes x[0, b) as values [o, o + b) of the destination row.
template <class DequantizeI4, class Store>
void DequantizeRotatedRow(const std::uint8_t* in, std::size_t n, DequantizeI4 dequantize,
                          Store store) {
  constexpr auto kGroup = static_cast<std::size_t>(kI4Group);
  const auto b = static_cast<std::size_t>(I4HBlock(static_cast<std::int64_t>(n)));
  alignas(64) float x[kRotBlockMax];
  alignas(64) std::uint8_t row[kRotBlockMax / 2 + kRotBlockMax / kGroup * 4];
  for (std::size_t o = 0; o < n; o += b) {
    std::memcpy(row, in + o / 2, b / 2);
    std::memcpy(row + b / 2, in + n / 2 + o / kGroup * 4, b / kGroup * 4);
    dequantize(row, b, x);
    RotateBlock(x, b);
    store(o, b, x);
  }
}

}  // namespace
}  // namespace ringkv::kernels
