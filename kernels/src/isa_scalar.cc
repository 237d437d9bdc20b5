// The plain scalar tier: portable loops, no intrinsics. It is also the fallback
// on CPUs without SSE4.2, and it is tested against reference.cc like every tier.
#include <cstring>

#include "fill_kernels.h"
#include "ringkv/kernels/dtype.h"

namespace ringkv::kernels {
namespace {

float LoadAsFloat(DType dtype, const void* src, std::size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(src)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const std::uint16_t*>(src)[i]);
  }
  return 0.0f;
}

void StoreFromFloat(DType dtype, void* dst, std::size_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = value;
      return;
    case DType::kF16:
      static_cast<std::uint16_t*>(dst)[i] = F32ToF16(value);
      return;
    case DType::kBF16:
      static_cast<std::uint16_t*>(dst)[i] = F32ToBF16(value);
      return;
  }
}

void Convert(DType from, const void* src, DType to, void* dst, std::size_t n) noexcept {
  if (from == to) {
    std::memcpy(dst, src, n * SizeOf(from));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) StoreFromFloat(to, dst, i, LoadAsFloat(from, src, i));
}

void RingGather(const void* src, std::ptrdiff_t src_row_stride, void* dst,
                std::ptrdiff_t dst_row_stride, std::size_t rows, std::size_t k,
                std::size_t ring_idx, std::size_t elem_size) noexcept {
  // Slot s holds logical column (s - ring_idx) mod k: the row is rotated right
  // by ring_idx, i.e. logical [k - r, k) lands in slots [0, r).
  const std::size_t r = k == 0 ? 0 : ring_idx % k;
  for (std::size_t row = 0; row < rows; ++row) {
    const auto* s = static_cast<const std::byte*>(src) +
                    static_cast<std::ptrdiff_t>(row) * src_row_stride *
                        static_cast<std::ptrdiff_t>(elem_size);
    auto* d = static_cast<std::byte*>(dst) + static_cast<std::ptrdiff_t>(row) * dst_row_stride *
                                                 static_cast<std::ptrdiff_t>(elem_size);
    std::memcpy(d, s + (k - r) * elem_size, r * elem_size);
    std::memcpy(d + r * elem_size, s, (k - r) * elem_size);
  }
}

}  // namespace

void FillScalarKernels(KernelTable& table) noexcept {
  table.convert = Convert;
  table.ring_gather = RingGather;
  // table.attend: filled by the SDPA work (kernels/src/attend_scalar).
}

}  // namespace ringkv::kernels
