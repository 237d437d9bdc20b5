#pragma once
// KernelTable::convert_rows on the xsimd tiers: row by row, float <-> float
// through Convert, float -> kI8 / kI4 / kI4H quantizing, quantized -> float
// dequantizing, and a quantized dtype to itself as a byte copy of each row.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "convert-inl.h"
#include "hadamard.h"
#include "quantize-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch, class From>
void QuantizeRow(const void* src, DType to, std::uint8_t* dst, std::size_t n) noexcept {
  const auto* x = static_cast<const typename From::Stored*>(src);
  if (to == DType::kI8) {
    QuantizeI8Row<Arch, From>(x, n, dst);
  } else if (to == DType::kI4) {
    QuantizeI4Row<Arch, From>(x, n, dst);
  } else {
    QuantizeRotatedRow([x](std::size_t o, std::size_t b,
                           float* f) { ConvertRun<Arch, From, F32Tag>(x + o, f, b); },
                       [](const float* f, std::size_t b, std::uint8_t* row) {
                         QuantizeI4Row<Arch, F32Tag>(f, b, row);
                       },
                       n, dst);
  }
}

template <class Arch, class To>
void DequantizeRow(DType from, const std::uint8_t* src, void* dst, std::size_t n) noexcept {
  auto* out = static_cast<typename To::Stored*>(dst);
  if (from == DType::kI8) {
    DequantizeI8Row<Arch, To>(src, n, out);
  } else if (from == DType::kI4) {
    DequantizeI4Row<Arch, To>(src, n, out);
  } else {
    DequantizeRotatedRow(
        src, n,
        [](const std::uint8_t* row, std::size_t b, float* f) {
          DequantizeI4Row<Arch, F32Tag>(row, b, f);
        },
        [out](std::size_t o, std::size_t b, const float* f) {
          ConvertRun<Arch, F32Tag, To>(f, out + o, b);
        });
  }
}

template <class Arch>
void ConvertRow(DType from, const std::uint8_t* src, DType to, std::uint8_t* dst,
                std::size_t n) noexcept {
  if (from == to) {
    CopyBytes<Arch>(src, dst, RowBytes(from, static_cast<std::int64_t>(n)));
  } else if (!IsQuantized(from) && !IsQuantized(to)) {
    Convert<Arch>(from, src, to, dst, n);
  } else if (IsQuantized(to)) {
    switch (from) {
      case DType::kF32:
        QuantizeRow<Arch, F32Tag>(src, to, dst, n);
        return;
      case DType::kF16:
        QuantizeRow<Arch, F16Tag>(src, to, dst, n);
        return;
      case DType::kBF16:
        QuantizeRow<Arch, BF16Tag>(src, to, dst, n);
        return;
      case DType::kI8:
      case DType::kI4:
      case DType::kI4H:
        std::terminate();  // quantized to another quantized dtype: not supported
    }
  } else {
    switch (to) {
      case DType::kF32:
        DequantizeRow<Arch, F32Tag>(from, src, dst, n);
        return;
      case DType::kF16:
        DequantizeRow<Arch, F16Tag>(from, src, dst, n);
        return;
      case DType::kBF16:
        DequantizeRow<Arch, BF16Tag>(from, src, dst, n);
        return;
      case DType::kI8:
      case DType::kI4:
      case DType::kI4H:
        return;  // handled above
    }
  }
}

template <class Arch>
void ConvertRows(DType from, const void* src, std::ptrdiff_t src_stride, DType to, void* dst,
                 std::ptrdiff_t dst_stride, std::size_t rows, std::size_t n) noexcept {
  // Programmer errors (lib/ validates user input): terminate like Expects, which
  // the per-ISA units cannot use (GSL's helpers would be weak symbols here).
  if ((IsInt4(to) || IsInt4(from)) && n % static_cast<std::size_t>(kI4Group) != 0) {
    std::terminate();
  }
  if (IsQuantized(from) && IsQuantized(to) && from != to) std::terminate();
  const auto src_bytes = src_stride * static_cast<std::ptrdiff_t>(SizeOf(from));
  const auto dst_bytes = dst_stride * static_cast<std::ptrdiff_t>(SizeOf(to));
  const auto* s = static_cast<const std::uint8_t*>(src);
  auto* d = static_cast<std::uint8_t*>(dst);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto ri = static_cast<std::ptrdiff_t>(r);
    ConvertRow<Arch>(from, s + ri * src_bytes, to, d + ri * dst_bytes, n);
  }
}

template <class Arch>
void FillConvertRows(KernelTable& table) {
  table.convert_rows = ConvertRows<Arch>;
}

}  // namespace
}  // namespace ringkv::kernels
