#pragma once
// Helpers shared by the benchmark files: aligned buffers of any dtype filled
// with deterministic values, a growing kernel workspace, and the label format the summary reads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>

#include "ringkv/dtype.h"

namespace ringkv::bench {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

// 64 B-aligned, uninitialised.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes)
      : bytes_(bytes), data_(::operator new[](bytes == 0 ? 64 : bytes, std::align_val_t{64})) {}
  void* Data() const { return data_.get(); }
  std::size_t Bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  std::unique_ptr<void, AlignedFree> data_;
};

// A kernel workspace that grows on the first call and is then reused, as in a Context.
class GrowingWorkspace {
 public:
  std::span<std::byte> AtLeast(std::size_t bytes) {
    if (buffer_.Bytes() < bytes) buffer_ = Buffer(bytes);
    return {static_cast<std::byte*>(buffer_.Data()), buffer_.Bytes()};
  }

 private:
  Buffer buffer_{0};
};

// n elements of `dtype`, values in [-1, 1) from a cheap deterministic generator.
inline Buffer RandomBuffer(DType dtype, std::size_t n, std::uint32_t seed) {
  Buffer b(n * SizeOf(dtype));
  std::uint32_t x = seed * 2654435761u + 1u;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float v = static_cast<float>(x >> 8) * 0x1p-23f - 1.0f;
    switch (dtype) {
      case DType::kF32:
        static_cast<float*>(b.Data())[i] = v;
        break;
      case DType::kF16:
        static_cast<std::uint16_t*>(b.Data())[i] = F32ToF16(v);
        break;
      case DType::kBF16:
        static_cast<std::uint16_t*>(b.Data())[i] = F32ToBF16(v);
        break;
      case DType::kI8:
      case DType::kI4:
      case DType::kI4H:
        break;  // quantized buffers are made by quantizing a float one
    }
  }
  return b;
}

// The label every case sets; bench_main.cc prints it in the summary.
inline std::string SummaryLabel(const std::string& dtype, const std::string& limit) {
  return "dtype=" + dtype + " limit=" + limit;
}

}  // namespace ringkv::bench
