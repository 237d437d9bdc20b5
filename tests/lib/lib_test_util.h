#pragma once
// Helpers shared by the tensor-core tests.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ringkv/ringkv.h"

namespace ringkv::test {

// 0, 1, 2, ... : every element of a test tensor tells where it came from.
inline std::vector<float> Iota(std::int64_t count, float start = 0.0f) {
  std::vector<float> values(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<float>(i);
  return values;
}

// Everything observable about a tensor, to prove that a failed call changed nothing.
struct TensorState {
  std::string summary;
  const void* data = nullptr;
  std::vector<float> values;

  explicit TensorState(const Tensor& tensor)
      : summary(Summary(tensor)), data(tensor.Data()), values(tensor.ToVector()) {}
  friend bool operator==(const TensorState&, const TensorState&) = default;
};

// Runs `call`, expects it to throw E, and checks that the message contains each of `parts`.
template <class E, class F>
void ExpectThrowWith(F&& call, std::initializer_list<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "expected an exception containing \"" << *parts.begin() << "\"";
  } catch (const E& error) {
    for (const std::string& part : parts) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr(part));
    }
  }
}

}  // namespace ringkv::test
