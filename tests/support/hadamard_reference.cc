// See hadamard_reference.h. O(n * b): clarity over speed.
#include "support/hadamard_reference.h"

#include <bit>
#include <cmath>

#include "ringkv/kernels/dtype.h"

namespace ringkv::test {

double HadamardSign(std::int64_t i, std::int64_t j) {
  return std::popcount(static_cast<std::uint64_t>(i & j)) % 2 != 0 ? -1.0 : 1.0;
}

std::vector<double> ReferenceRotate(std::span<const double> row) {
  const auto n = static_cast<std::int64_t>(row.size());
  const std::int64_t b = I4HBlock(n);
  const double norm = 1.0 / std::sqrt(static_cast<double>(b));
  std::vector<double> out(row.size(), 0.0);
  for (std::int64_t first = 0; first < n; first += b) {
    for (std::int64_t i = 0; i < b; ++i) {
      double sum = 0.0;
      for (std::int64_t j = 0; j < b; ++j) {
        sum += HadamardSign(i, j) * row[static_cast<std::size_t>(first + j)];
      }
      out[static_cast<std::size_t>(first + i)] = sum * norm;
    }
  }
  return out;
}

}  // namespace ringkv::test
