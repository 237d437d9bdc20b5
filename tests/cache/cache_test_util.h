#pragma once
// Token generators and readers for the cache tests. Every element of token p
// encodes p, so a test can read back which positions a cache holds, in which
// order, and check that no element was corrupted:
//   K[0, h, t, d] = 16 p + 4 h + (d % 4)      V[0, h, t, d] = -(16 p + 4 h + (d % 4)) - 1

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ringkv/error.h"
#include "ringkv/kv_history.h"
#include "ringkv/tensor.h"

namespace ringkv::test {

// The message of the Error `call` throws (a failure when it throws nothing, or
// anything that is not a ringkv::Error).
template <class Call>
std::string ErrorOf(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ringkv::Error";
  return {};
}

struct Dims {
  std::int64_t heads = 2;
  std::int64_t k_dim = 8;
  std::int64_t v_dim = 4;
  DType dtype = DType::kF32;
};

inline float KeyValue(int pos, std::int64_t h, std::int64_t d) {
  return static_cast<float>(16 * pos + 4 * h + d % 4);
}
inline float ValueValue(int pos, std::int64_t h, std::int64_t d) {
  return -KeyValue(pos, h, d) - 1.0f;
}

// Keys [1, H, count, D] and values [1, H, count, Dv] for positions first .. first + count - 1.
inline std::pair<Tensor, Tensor> Tokens(int first, int count, const Dims& dims = {}) {
  std::vector<float> k, v;
  for (std::int64_t h = 0; h < dims.heads; ++h) {
    for (int t = 0; t < count; ++t) {
      for (std::int64_t d = 0; d < dims.k_dim; ++d) k.push_back(KeyValue(first + t, h, d));
    }
  }
  for (std::int64_t h = 0; h < dims.heads; ++h) {
    for (int t = 0; t < count; ++t) {
      for (std::int64_t d = 0; d < dims.v_dim; ++d) v.push_back(ValueValue(first + t, h, d));
    }
  }
  return {Tensor::FromVector(k, {1, dims.heads, count, dims.k_dim}, dims.dtype),
          Tensor::FromVector(v, {1, dims.heads, count, dims.v_dim}, dims.dtype)};
}

// The positions held by a view, in view order; every element of K and V is
// checked against the encoding (a corrupted element fails the test).
inline std::vector<int> Positions(const KvView& view) {
  std::vector<int> positions;
  if (view.Empty()) return positions;
  const Tensor keys = view.ConcatKeys();
  const Tensor values = view.ConcatValues();
  const std::vector<float> k = keys.ToVector();
  const std::vector<float> v = values.ToVector();
  const std::int64_t heads = keys.Dim(1), length = keys.Dim(2), kd = keys.Dim(3),
                     vd = values.Dim(3);
  for (std::int64_t t = 0; t < length; ++t) {
    const int pos = static_cast<int>(k[static_cast<std::size_t>(t * kd)]) / 16;
    positions.push_back(pos);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t d = 0; d < kd; ++d) {
        EXPECT_EQ(k[static_cast<std::size_t>((h * length + t) * kd + d)], KeyValue(pos, h, d))
            << "key slot " << t << " head " << h << " dim " << d;
      }
      for (std::int64_t d = 0; d < vd; ++d) {
        EXPECT_EQ(v[static_cast<std::size_t>((h * length + t) * vd + d)], ValueValue(pos, h, d))
            << "value slot " << t << " head " << h << " dim " << d;
      }
    }
  }
  return positions;
}

inline std::vector<int> Range(int first, int end) {
  std::vector<int> r;
  for (int p = first; p < end; ++p) r.push_back(p);
  return r;
}

}  // namespace ringkv::test
