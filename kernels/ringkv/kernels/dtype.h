#pragma once
// Element types that ringkv stores. Lives in kernels/ because the kernels read
// every one of them as stored; lib/ringkv/dtype.h adds names and formatting.

#include <cstddef>
#include <cstdint>

namespace ringkv {

enum class DType : std::uint8_t { kF32, kF16, kBF16 };

constexpr std::size_t SizeOf(DType dtype) noexcept { return dtype == DType::kF32 ? 4 : 2; }

// Whether `dtype` is one of the enumerators (a cast can make any other value).
// The library rejects other values wherever a DType enters its API.
constexpr bool IsKnownDType(DType dtype) noexcept {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
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
