#pragma once
// What the attention entry points' tests (single-sequence, batched, padded)
// share: comparing outputs bit for bit, and the strong-guarantee check (a bad
// call throws ringkv::Error naming every given part and leaves `out` as it was).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cache_test_util.h"
#include "ringkv/tensor.h"

namespace ringkv::test {

// The f32 elements' bit patterns: equal outputs are equal to the bit (no tolerance).
inline std::vector<std::uint32_t> Bits(const Tensor& t) {
  const std::vector<float> values = t.ToVector();
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// Throws an Error whose message contains every part, and leaves out as it was.
template <class F>
void ExpectRejected(F&& call, const Tensor& out, const std::vector<std::string>& parts) {
  const std::vector<float> before = out.Empty() ? std::vector<float>{} : out.ToVector();
  const std::string message = ErrorOf(call);
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << message << "\nwant: " << part;
  }
  if (!out.Empty()) {
    EXPECT_EQ(out.ToVector(), before);
  }
}

}  // namespace ringkv::test
