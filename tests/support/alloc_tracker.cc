#include "alloc_tracker.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<std::size_t> live{0};
std::atomic<std::size_t> peak{0};
std::atomic<std::size_t> count{0};

void* Track(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  count.fetch_add(1, std::memory_order_relaxed);
  const std::size_t now = live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  std::size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  return p;
}

void Untrack(void* p) noexcept {
  if (p == nullptr) return;
  live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}

void* Aligned(std::size_t n, std::align_val_t a) {
  const auto alignment = static_cast<std::size_t>(a);
  const std::size_t rounded = (n + alignment - 1) / alignment * alignment;
  return Track(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded));
}

}  // namespace

namespace ringkv::test {

std::size_t LiveAllocatedBytes() noexcept { return live.load(); }
std::size_t ResetPeakAllocatedBytes() noexcept {
  const std::size_t now = live.load();
  peak.store(now);
  return now;
}
std::size_t PeakAllocatedBytes() noexcept { return peak.load(); }
std::size_t AllocationCount() noexcept { return count.load(); }

}  // namespace ringkv::test

void* operator new(std::size_t n) { return Track(std::malloc(n == 0 ? 1 : n)); }
void* operator new[](std::size_t n) { return Track(std::malloc(n == 0 ? 1 : n)); }
void* operator new(std::size_t n, std::align_val_t a) { return Aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return Aligned(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new[](n);
  } catch (...) {
    return nullptr;
  }
}
// The library's Storage uses the nothrow aligned form: without these, its blocks
// would come from the runtime's allocator and be freed here.
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return Aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return Aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { Untrack(p); }
void operator delete[](void* p) noexcept { Untrack(p); }
void operator delete(void* p, std::size_t) noexcept { Untrack(p); }
void operator delete[](void* p, std::size_t) noexcept { Untrack(p); }
void operator delete(void* p, std::align_val_t) noexcept { Untrack(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Untrack(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Untrack(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Untrack(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Untrack(p); }
