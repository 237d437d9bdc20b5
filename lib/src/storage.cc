#include <fmt/format.h>

#include <cstring>
#include <new>

#include "ringkv/error.h"
#include "ringkv/tensor.h"

namespace ringkv {
namespace {

// 64 B: one cache line, and the widest vector (AVX-512) the kernels load.
constexpr std::align_val_t kStorageAlignment{64};

std::byte* AllocateBytes(std::size_t bytes) {
  try {
    return static_cast<std::byte*>(::operator new(bytes, kStorageAlignment));
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("[Storage] cannot allocate {} bytes", bytes));
  }
}

}  // namespace

Storage::Storage(std::size_t bytes, Init init) : data_(AllocateBytes(bytes)), bytes_(bytes) {
  if (init == Init::kZero) std::memset(data_, 0, bytes_);
}

Storage::~Storage() { ::operator delete(data_, kStorageAlignment); }

}  // namespace ringkv
