#pragma once
// Helpers shared by the benchmark files: buffers of any dtype filled
// with deterministic values, a growing kernel workspace, and the label format the summary reads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ringkv/dtype.h"
#include "ringkv/tensor.h"

namespace ringkv::bench {

// Uninitialised bytes in a ringkv::Storage, so that the benchmarks' K, V and
// bandwidth buffers sit on the pages the library's own tensors and cache blocks
// get (2 MiB-aligned and advised for huge pages from 2 MiB up).
class Buffer {
 public:
  explicit Buffer(std::size_t bytes)
      : storage_(std::make_unique<Storage>(bytes, Storage::Init::kUninitialized)) {}
  void* Data() const { return storage_->Data(); }
  std::size_t Bytes() const { return storage_->Bytes(); }

 private:
  std::unique_ptr<Storage> storage_;
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
