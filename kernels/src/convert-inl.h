#pragma once
// Bulk dtype conversion, any pair of f32/f16/bf16: f32 batches in registers,
// round to nearest even when narrowing, NaN and Inf preserved, a scalar tail
// through the single-value conversions of dtype.h (the same rounding).
// f16: F16C on the AVX2 and AVX-512 tiers, integer bit manipulation on SSE4.2
// (see simd_compat-inl.h).
#include <cstddef>
#include <cstdint>

#include "fill_kernels.h"
#include "simd_compat-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch, class From, class To>
void ConvertRun(const void* src, void* dst, std::size_t n) noexcept {
  constexpr std::size_t kW = FloatBatch<Arch>::size;
  const auto* s = static_cast<const typename From::Stored*>(src);
  auto* d = static_cast<typename To::Stored*>(dst);
  std::size_t i = 0;
  // Two batches per step: the loads of the second overlap the first's convert.
  for (; i + 2 * kW <= n; i += 2 * kW) {
    const FloatBatch<Arch> a = LoadAsFloat<Arch, From>(s + i);
    const FloatBatch<Arch> b = LoadAsFloat<Arch, From>(s + i + kW);
    StoreFromFloat<Arch, To>(a, d + i);
    StoreFromFloat<Arch, To>(b, d + i + kW);
  }
  if (i + kW <= n) {
    StoreFromFloat<Arch, To>(LoadAsFloat<Arch, From>(s + i), d + i);
    i += kW;
  }
  for (; i < n; ++i) d[i] = ScalarFromFloat<To>(ScalarToFloat<From>(s[i]));
}

template <class Arch, class From>
void ConvertFrom(const void* src, DType to, void* dst, std::size_t n) noexcept {
  switch (to) {
    case DType::kF32:
      ConvertRun<Arch, From, F32Tag>(src, dst, n);
      return;
    case DType::kF16:
      ConvertRun<Arch, From, F16Tag>(src, dst, n);
      return;
    case DType::kBF16:
      ConvertRun<Arch, From, BF16Tag>(src, dst, n);
      return;
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      return;  // element-wise conversion covers element types only (convert_rows quantizes)
  }
}

template <class Arch>
void CopyElements(const void* src, void* dst, std::size_t bytes) noexcept {
  CopyBytes<Arch>(static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), bytes);
}

template <class Arch>
void Convert(DType from, const void* src, DType to, void* dst, std::size_t n) noexcept {
  if (from == to) {
    CopyElements<Arch>(src, dst, n * SizeOf(from));
    return;
  }
  switch (from) {
    case DType::kF32:
      ConvertFrom<Arch, F32Tag>(src, to, dst, n);
      return;
    case DType::kF16:
      ConvertFrom<Arch, F16Tag>(src, to, dst, n);
      return;
    case DType::kBF16:
      ConvertFrom<Arch, BF16Tag>(src, to, dst, n);
      return;
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      return;  // element-wise conversion covers element types only (convert_rows quantizes)
  }
}

template <class Arch>
void FillConvert(KernelTable& table) {
  table.convert = Convert<Arch>;
}

}  // namespace
}  // namespace ringkv::kernels
