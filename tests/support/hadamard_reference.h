#pragma once
// The kI4H rotation (kernels/ringkv/kernels/dtype.h) in float64, by its
// definition: an explicit sum over the Hadamard matrix's entries, not the
// kernels' butterflies. Test support only, like sdpa_reference.h.

#include <cstdint>
#include <span>
#include <vector>

namespace ringkv::test {

// Entry (i, j) of the Sylvester Hadamard matrix: (-1)^popcount(i & j).
double HadamardSign(std::int64_t i, std::int64_t j);

// Each block of I4HBlock(n) values of `row` (n values, n % 32 == 0) times
// H_b / sqrt(b). The transform is its own inverse.
std::vector<double> ReferenceRotate(std::span<const double> row);

}  // namespace ringkv::test
