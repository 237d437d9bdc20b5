#include <fmt/format.h>

#include <cstring>
#include <new>

#include "ringkv/error.h"
#include "ringkv/tensor.h"

namespace ringkv {
namespace {

// 64 B: one cache line, and the widest vector (AVX-512) the kernels load.
constexpr std::align_val_t kStorageAlignment{64};

// The nothrow form: sanitizer runtimes cannot throw std::bad_alloc from the
// throwing one and abort instead, so this is the only form that reports a failed
// allocation the same way in every build.
std::byte* AllocateBytes(std::size_t bytes) {
  void* data = ::operator new(bytes, kStorageAlignment, std::nothrow);
  if (data == nullptr) throw Error(fmt::format("[Storage] cannot allocate {} bytes", bytes));
  return static_cast<std::byte*>(data);
}

}  // namespace

Storage::Storage(std::size_t bytes, Init init) : data_(AllocateBytes(bytes)), bytes_(bytes) {
  if (init == Init::kZero) std::memset(data_, 0, bytes_);
}

Storage::Storage(std::byte* data, std::size_t bytes, bool writable) noexcept
    : data_(data), bytes_(bytes), owned_(false), writable_(writable) {}

Storage::~Storage() {
  if (owned_) ::operator delete(data_, kStorageAlignment);
}

}  // namespace ringkv
