#pragma once
// Counts the bytes live through operator new in a test binary that links
// ringkv_alloc_tracker (it replaces the global allocation functions,
// alloc_tracker.cc), the peak since the last reset, and the number of
// allocations: a deterministic memory measure that works the same with and
// without AddressSanitizer.

#include <cstddef>

namespace ringkv::test {

std::size_t LiveAllocatedBytes() noexcept;
// Resets the peak to the bytes live now, returns them.
std::size_t ResetPeakAllocatedBytes() noexcept;
std::size_t PeakAllocatedBytes() noexcept;
// Calls of any operator new (every thread) since the program started.
std::size_t AllocationCount() noexcept;

}  // namespace ringkv::test
