#pragma once
// Counts the bytes live through operator new in this test binary (the prompt
// test suite replaces the global allocation functions, alloc_tracker.cc), and
// the peak since the last reset: a deterministic memory measure that works the
// same with and without AddressSanitizer.

#include <cstddef>

namespace ringkv::test {

std::size_t LiveAllocatedBytes() noexcept;
// Resets the peak to the bytes live now, returns them.
std::size_t ResetPeakAllocatedBytes() noexcept;
std::size_t PeakAllocatedBytes() noexcept;

}  // namespace ringkv::test
