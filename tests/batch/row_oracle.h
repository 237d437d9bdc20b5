#pragma once
// The float64 oracle for one row of a batched attention output: the row's q
// against exactly the keys and values the test says it sees.

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringkv/tensor.h"
#include "support/sdpa_reference.h"

namespace ringkv::test {

// out[0, :, row, :] of softmax(scale q k^T) v for q [1, Hq, N, D] and the row's
// keys k [1, Hkv, n, D] / values v [1, Hkv, n, Dv] (any dtype; empty or n == 0:
// zeros), as [Hq, Dv].
inline std::vector<double> RowOracle(const Tensor& q, std::int64_t row, const Tensor& k,
                                     const Tensor& v, std::int64_t value_dim, float scale) {
  const std::int64_t hq = q.Dim(1), d = q.Dim(3);
  if (k.Empty() || k.Dim(2) == 0)
    return std::vector<double>(static_cast<std::size_t>(hq * value_dim));
  const std::vector<float> qr = q.Slice(2, row, row + 1).AsType(DType::kF32).ToVector();
  const std::vector<float> kr = k.AsType(DType::kF32).ToVector();
  const std::vector<float> vr = v.AsType(DType::kF32).ToVector();
  const std::int64_t hkv = k.Dim(1), n = k.Dim(2);
  kernels::SdpaParams params;
  params.q = {qr.data(), DType::kF32, {1, hq, 1, d}, {hq * d, d, d, 1}};
  const kernels::KvSegment segment{
      {kr.data(), DType::kF32, {1, hkv, n, d}, {hkv * n * d, n * d, d, 1}},
      {vr.data(),
       DType::kF32,
       {1, hkv, n, value_dim},
       {hkv * n * value_dim, n * value_dim, value_dim, 1}}};
  params.kv = std::span<const kernels::KvSegment>(&segment, 1);
  params.scale = scale;
  return ReferenceSdpa(params);
}

// Compares row `row` of out [1, Hq, N, Dv] with the oracle's [Hq, Dv].
inline void ExpectRow(const Tensor& out, std::int64_t row, const std::vector<double>& want,
                      double tol, const std::string& what) {
  const std::int64_t hq = out.Dim(1), dv = out.Dim(3);
  const std::vector<float> got = out.Slice(2, row, row + 1).ToVector();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::int64_t h = 0; h < hq; ++h) {
    for (std::int64_t c = 0; c < dv; ++c) {
      const auto i = static_cast<std::size_t>(h * dv + c);
      EXPECT_NEAR(got[i], want[i], tol) << what << ": row " << row << " head " << h << " dim " << c;
    }
  }
}

}  // namespace ringkv::test
