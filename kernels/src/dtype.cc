// Scalar f16/bf16 conversions, integer-only so that the result does not depend
// on the floating-point environment or on which ISA the caller was built for.
#include "ringkv/kernels/dtype.h"

#include <bit>

namespace ringkv {
namespace {

// Rounds `value >> shift` to nearest, ties to even.
std::uint32_t ShiftRoundEven(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u) != 0)) ? 1u : 0u);
}

}  // namespace

float F16ToF32(std::uint16_t bits) noexcept {
  const std::uint32_t sign = std::uint32_t{bits & 0x8000u} << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t F32ToF16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // Inf, or NaN kept quiet with the top payload bits
    const std::uint32_t nan_bits =
        magnitude == 0x7F800000u ? 0u : 0x200u | ((magnitude >> 13) & 0x3FFu);
    return static_cast<std::uint16_t>(sign | 0x7C00u | nan_bits);
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent > 15) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (exponent >= -14) {
    // Normal half. A rounding carry ripples into the exponent, up to Inf.
    const std::uint32_t rebased =
        (static_cast<std::uint32_t>(exponent + 15) << 23) | (magnitude & 0x7FFFFFu);
    return static_cast<std::uint16_t>(sign | ShiftRoundEven(rebased, 13));
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal
  // Subnormal half: the value in units of 2^-24, rounded; 0x400 is the smallest normal.
  const std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  return static_cast<std::uint16_t>(sign | ShiftRoundEven(significand, -(exponent + 1)));
}

float BF16ToF32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(std::uint32_t{bits} << 16);
}

std::uint16_t F32ToBF16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>(ShiftRoundEven(x, 16));
}

}  // namespace ringkv
