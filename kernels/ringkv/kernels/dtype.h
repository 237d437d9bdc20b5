#pragma once
// Element types that ringkv stores. Lives in kernels/ because the kernels read
// every one of them as stored; lib/ringkv/dtype.h adds names and formatting.

#include <cstddef>
#include <cstdint>

namespace ringkv {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI8, kI4, kI4H };

// Whether `dtype` is a tensor element type: f32, f16 or bf16 (a cast can make any
// other value). The library rejects other values wherever a tensor's DType enters its API.
constexpr bool IsKnownDType(DType dtype) noexcept {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// Quantized K/V storage: only a cache's blocks hold these, never a tensor. A
// stored row of n values carries its scales after its data, so a row is
// self-contained and block copies, snapshots and files move rows as bytes:
//   kI8: n int8 q_i, then one f32 scale s (4 bytes, unaligned); x_i = s * q_i,
//        symmetric, q_i in [-127, 127] (one scale per token per kv head).
//   kI4: n % kI4Group == 0; n / 2 bytes, value 2i in the low nibble of byte i
//        and 2i + 1 in the high nibble, two's complement in [-7, 7]; then n /
//        kI4Group f32 scales, s_g for values [32 g, 32 g + 32); x_i = s_g * q_i.
//   kI4H: the kI4 row of the row rotated by an orthonormal Hadamard transform:
//        in blocks of b = I4HBlock(n) values, y = H_b x / sqrt(b) (H_b the
//        Sylvester Hadamard matrix, entry (i, j) = (-1)^popcount(i & j)).
//        Rotation spreads a large channel over the block, so one outlier no
//        longer sets the scale of its whole group. H_b / sqrt(b) is symmetric
//        and its own inverse: attention scores rotated q against the rows
//        (q.k is unchanged) and rotates the output back; dequantizing rotates
//        back too.
// A row (or group) holding NaN or Inf stores a NaN scale, so it reads back as
// NaN and poisons attention the way a float cache would.
constexpr bool IsQuantized(DType dtype) noexcept {
  return dtype == DType::kI8 || dtype == DType::kI4 || dtype == DType::kI4H;
}
inline constexpr std::int64_t kI4Group = 32;

// kI4 and kI4H: rows of n % kI4Group == 0 values.
constexpr bool IsInt4(DType dtype) noexcept { return dtype == DType::kI4 || dtype == DType::kI4H; }

// kI4H's rotation block for rows of n values (n % kI4Group == 0): the largest
// power of two dividing n, at most kI4HBlockMax (so a row's block fits on the stack).
inline constexpr std::int64_t kI4HBlockMax = 256;
constexpr std::int64_t I4HBlock(std::int64_t n) noexcept {
  std::int64_t b = kI4Group;
  while (b < kI4HBlockMax && n % (2 * b) == 0) b *= 2;
  return b;
}

// A dtype a cache may store K or V in: an element type or a quantized one.
constexpr bool IsStorageDType(DType dtype) noexcept {
  return IsKnownDType(dtype) || IsQuantized(dtype);
}

// Bytes per unit of an array's strides: the element size, or for quantized
// dtypes 1 (their strides count bytes of stored rows).
constexpr std::size_t SizeOf(DType dtype) noexcept {
  return dtype == DType::kF32 ? 4 : IsQuantized(dtype) ? 1 : 2;
}

// Bytes of one stored row of n values, scales included (n % kI4Group == 0 for IsInt4).
constexpr std::size_t RowBytes(DType dtype, std::int64_t n) noexcept {
  const auto count = static_cast<std::size_t>(n);
  switch (dtype) {
    case DType::kI8:
      return count + 4;
    case DType::kI4:
    case DType::kI4H:
      return count / 2 + count / static_cast<std::size_t>(kI4Group) * 4;
    default:
      return count * SizeOf(dtype);
  }
}

}  // namespace ringkv

namespace ringkv {

// Single-value conversions, round to nearest even; NaN stays NaN (quietened),
// Inf stays Inf, f32 values beyond a half's range become Inf. Bulk conversion is
// vectorised in KernelTable::convert.
float F16ToF32(std::uint16_t bits) noexcept;
std::uint16_t F32ToF16(float value) noexcept;
float BF16ToF32(std::uint16_t bits) noexcept;
std::uint16_t F32ToBF16(float value) noexcept;

}  // namespace ringkv
