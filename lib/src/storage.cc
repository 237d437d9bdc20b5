#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ringkv/error.h"
#include "ringkv/tensor.h"

namespace ringkv {
namespace {

// 64 B: one cache line, and the widest vector (AVX-512) the kernels load.
constexpr std::align_val_t kStorageAlignment{64};

// kHugePageBytes is the size of a transparent huge page on x86-64 and on arm64
// with 4 KiB pages. Storage that large (a CausalCache pool's blocks, a long K or
// V tensor) is read once per decode step; on 4 KiB pages each page costs a TLB
// miss and the hardware prefetchers stop at every page boundary.
constexpr std::size_t kHugePageBytes = Storage::kHugePageBytes;
constexpr std::size_t kPageBytes = 4096;
constexpr std::size_t kColours = 16;

// Large storage starts one of kColours pages into its first huge page, the page
// picked by a hash of the huge page's address. Huge pages are allocated on
// huge-page boundaries, so without it two buffers read side by side (a layer's
// K and V) start at the same address modulo 2 MiB or more, and some cores key
// their L1 way prediction on those address bits (attention_tuning.md, "Huge
// pages"); the hash spreads buffers placed at any regular spacing. A function of
// the address alone, so ~Storage finds the allocation again.
std::size_t ColourOffset(std::uintptr_t huge_page) noexcept {
  const std::uint64_t index = huge_page / kHugePageBytes;
  static_assert(kColours == 16, "the colour is the top four bits of the hash");
  return static_cast<std::size_t>((index * 0x9E3779B97F4A7C15u) >> 60) * kPageBytes;
}

// Advice, not a request: hosts with transparent huge pages off (or on `always`)
// and kernels without them return an error or ignore it, and the bytes stay
// valid either way. It must come before the first touch, which places the pages.
void AdviseHugePages([[maybe_unused]] void* first, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static_cast<void>(::madvise(first, bytes, MADV_HUGEPAGE));
#endif
}

// The nothrow form: sanitizer runtimes cannot throw std::bad_alloc from the
// throwing one and abort instead, so this is the only form that reports a failed
// allocation the same way in every build.
std::byte* AllocateBytes(std::size_t bytes) {
  const auto failed = [bytes] {
    return Error(fmt::format("[Storage] cannot allocate {} bytes", bytes));
  };
  if (bytes < kHugePageBytes) {
    void* data = ::operator new(bytes, kStorageAlignment, std::nothrow);
    if (data == nullptr) throw failed();
    return static_cast<std::byte*>(data);
  }
  constexpr std::size_t kMostOffset = (kColours - 1) * kPageBytes;
  if (bytes > SIZE_MAX - kMostOffset) throw failed();
  void* huge = ::operator new (bytes + kMostOffset, std::align_val_t{kHugePageBytes}, std::nothrow);
  if (huge == nullptr) throw failed();
  const std::size_t offset = ColourOffset(reinterpret_cast<std::uintptr_t>(huge));
  AdviseHugePages(huge, offset + bytes);
  return static_cast<std::byte*>(huge) + offset;
}

void FreeBytes(std::byte* data, std::size_t bytes) noexcept {
  if (bytes < kHugePageBytes) {
    ::operator delete(data, kStorageAlignment);
    return;
  }
  // The colour offset is below one huge page: the allocation starts on the
  // huge-page boundary below data.
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(data);
  ::operator delete (data - address % kHugePageBytes, std::align_val_t{kHugePageBytes});
}

}  // namespace

Storage::Storage(std::size_t bytes, Init init) : data_(AllocateBytes(bytes)), bytes_(bytes) {
  if (init == Init::kZero) std::memset(data_, 0, bytes_);
}

Storage::Storage(std::byte* data, std::size_t bytes, bool writable) noexcept
    : data_(data), bytes_(bytes), owned_(false), writable_(writable) {}

Storage::~Storage() {
  if (owned_) FreeBytes(data_, bytes_);
}

}  // namespace ringkv
