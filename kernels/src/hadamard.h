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

// x[0, b) <- H_b x / sqrt(b), b a power of two: log2(b) butterfly passes. The
// transform is its own inverse.
inline void RotateBlock(float* x, std::size_t b) noexcept {
  for (std::size_t h = 1; h < b; h *= 2) {
    for (std::size_t i = 0; i < b; i += 2 * h) {
      for (std::size_t j = i; j < i + h; ++j) {
        const float lo = x[j];
        const float hi = x[j + h];
        x[j] = lo + hi;
        x[j + h] = lo - hi;
      }
    }
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
