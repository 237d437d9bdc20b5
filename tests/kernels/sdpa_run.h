#pragma once
// Runs kernels::Sdpa the way lib/ does: with a workspace of exactly
// SdpaWorkspaceBytes, 64-byte aligned, filled with a poison pattern so a kernel
// that read scratch before writing it would show.

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include "ringkv/kernels/sdpa.h"

namespace ringkv::test {

class AlignedBytes {
 public:
  explicit AlignedBytes(std::size_t bytes)
      : bytes_(bytes),
        data_(static_cast<std::byte*>(::operator new[](
            bytes == 0 ? 1 : bytes, std::align_val_t{kernels::kSdpaWorkspaceAlignment}))) {
    std::memset(data_.get(), 0xA5, bytes);  // poison: scratch must be written before it is read
  }
  std::span<std::byte> Span() noexcept { return {data_.get(), bytes_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept {
      ::operator delete[](p, std::align_val_t{kernels::kSdpaWorkspaceAlignment});
    }
  };
  std::size_t bytes_;
  std::unique_ptr<std::byte[], Free> data_;
};

inline void RunSdpa(const kernels::SdpaParams& params, const kernels::KernelTable& table,
                    kernels::Executor& executor) {
  AlignedBytes workspace(
      kernels::SdpaWorkspaceBytes(kernels::ShapeOf(params), executor.Concurrency()));
  kernels::Sdpa(params, table, executor, workspace.Span());
}

}  // namespace ringkv::test
