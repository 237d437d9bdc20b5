// Caches that store K/V quantized (int8, int4, int4h, int8 K + int4 V): what State()
// reads back, that every block move keeps the stored rows bit for bit
// (snapshots, forks, ring copies), and that bad input changes nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "cache_test_util.h"
#include "ringkv/causal_cache.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/tensor_ops.h"
#include "support/hadamard_reference.h"

namespace ringkv::test {
namespace {

constexpr std::int64_t kHeads = 2;
constexpr std::int64_t kKeyDim = 64;
constexpr std::int64_t kValueDim = 32;

// Token p's keys [1, H, 1, D] and values [1, H, 1, Dv]: the same numbers every time it is asked
// for.
std::pair<Tensor, Tensor> Token(int p, DType dtype = DType::kF32) {
  std::mt19937 rng(static_cast<unsigned>(1000 + p));
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> k(static_cast<std::size_t>(kHeads * kKeyDim));
  std::vector<float> v(static_cast<std::size_t>(kHeads * kValueDim));
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  return {Tensor::FromVector(k, {1, kHeads, 1, kKeyDim}, dtype),
          Tensor::FromVector(v, {1, kHeads, 1, kValueDim}, dtype)};
}

// Tokens [first, first + count) concatenated along the length axis.
std::pair<Tensor, Tensor> Tokens(int first, int count) {
  std::vector<Tensor> k, v;
  for (int p = first; p < first + count; ++p) {
    auto [kp, vp] = Token(p);
    k.push_back(kp);
    v.push_back(vp);
  }
  return {Concatenate(k, 2), Concatenate(v, 2)};
}

// Each row of `values` rotated as int4h stores it (float64).
std::vector<double> Rotated(const std::vector<double>& values, std::int64_t n) {
  std::vector<double> out;
  for (std::size_t r = 0; r < values.size(); r += static_cast<std::size_t>(n)) {
    const std::vector<double> row =
        ReferenceRotate(std::span(values).subspan(r, static_cast<std::size_t>(n)));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// |stored - input| <= s / 2 for every value, s the scale of its row (int8) or
// group of 32 (int4) computed in double from the input: symmetric rounding to
// the nearest step. For int4h the same holds for both rotated (float64). A 1e-6
// relative slack covers the f32 scale (and int4h's f32 rotation back).
void ExpectWithinHalfStep(const Tensor& input, const Tensor& stored, DType dtype) {
  ASSERT_EQ(stored.Dtype(), DType::kF32);
  ASSERT_EQ(stored.GetShape(), input.GetShape());
  const std::int64_t n = input.Dim(3);
  const std::vector<float> xf = input.ToVector();
  const std::vector<float> yf = stored.ToVector();
  std::vector<double> x(xf.begin(), xf.end());
  std::vector<double> y(yf.begin(), yf.end());
  if (dtype == DType::kI4H) {
    x = Rotated(x, n);
    y = Rotated(y, n);
  }
  const std::int64_t group = dtype == DType::kI8 ? n : kI4Group;
  const double levels = dtype == DType::kI8 ? 127.0 : 7.0;
  double worst = 0.0;
  for (std::size_t g = 0; g < x.size(); g += static_cast<std::size_t>(group)) {
    double amax = 0.0;
    for (std::size_t i = g; i < g + static_cast<std::size_t>(group); ++i) {
      amax = std::max(amax, std::abs(x[i]));
    }
    const double half_step = amax / levels / 2.0;
    for (std::size_t i = g; i < g + static_cast<std::size_t>(group); ++i) {
      const double err = std::abs(y[i] - x[i]);
      worst = std::max(worst, err / half_step);
      ASSERT_LE(err, half_step * (1.0 + 1e-6)) << "value " << i << " of " << DTypeName(dtype);
    }
  }
  EXPECT_GT(worst, 0.5);  // the data really was quantized
}

struct StorageCase {
  const char* name;
  KvStorage storage;
};

class QuantizedCacheTest : public ::testing::TestWithParam<StorageCase> {};

TEST_P(QuantizedCacheTest, StateReadsBackWithinHalfAStep) {
  const KvStorage storage = GetParam().storage;
  KVCache cache(/*block_tokens=*/4, storage);
  // A prefill across blocks, then decode steps, with f16 and strided inputs.
  const auto [k0, v0] = Tokens(0, 7);
  cache.Update(k0, v0);
  for (int p = 7; p < 10; ++p) {
    const auto [k, v] = Token(p, p % 2 == 0 ? DType::kF16 : DType::kF32);
    cache.Update(k, v);
  }
  const auto [k_all, v_all] = Tokens(0, 10);
  const KvView state = cache.State();
  EXPECT_EQ(state.KeyDtype(), storage.keys);
  EXPECT_EQ(state.ValueDtype(), storage.values);
  // Tokens 8 came in as f16: compare against what was given.
  std::vector<Tensor> k_given, v_given;
  for (int p = 0; p < 10; ++p) {
    auto [k, v] = Token(p, p >= 7 && p % 2 == 0 ? DType::kF16 : DType::kF32);
    k_given.push_back(k.AsType(DType::kF32));
    v_given.push_back(v.AsType(DType::kF32));
  }
  ExpectWithinHalfStep(Concatenate(k_given, 2), state.ConcatKeys(), storage.keys);
  ExpectWithinHalfStep(Concatenate(v_given, 2), state.ConcatValues(), storage.values);
  EXPECT_EQ(cache.AllocatedBytes(),
            3u * 4u * static_cast<std::size_t>(kHeads) *
                (RowBytes(storage.keys, kKeyDim) + RowBytes(storage.values, kValueDim)));
}

TEST_P(QuantizedCacheTest, SegmentsRefuseQuantizedRows) {
  KVCache cache(4, GetParam().storage);
  const auto [k, v] = Tokens(0, 3);
  cache.Update(k, v);
  EXPECT_NE(ErrorOf([&] { (void)cache.State().KeySegments(); }).find("ConcatKeys"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { (void)cache.State().ValueSegments(); }).find("stored as"),
            std::string::npos);
}

TEST_P(QuantizedCacheTest, SnapshotRestoreAndForkKeepStoredRowsBitForBit) {
  KVCache cache(4, GetParam().storage);
  const auto [k, v] = Tokens(0, 6);
  cache.Update(k, v);
  const KVCache fork = cache.Fork();
  const auto snapshot = cache.Snapshot(0);
  const auto [k2, v2] = Tokens(6, 5);
  cache.Update(k2, v2);  // writes into the block the fork and snapshot share
  ASSERT_TRUE(cache.Restore(snapshot.get(), 6));
  EXPECT_EQ(Bits(cache.State().ConcatKeys()), Bits(fork.State().ConcatKeys()));
  EXPECT_EQ(Bits(cache.State().ConcatValues()), Bits(fork.State().ConcatValues()));
  // The same tokens written afresh store the same rows.
  KVCache fresh(3, GetParam().storage);
  fresh.Update(k, v);
  EXPECT_EQ(Bits(fresh.State().ConcatKeys()), Bits(fork.State().ConcatKeys()));
}

TEST_P(QuantizedCacheTest, RingWrapThenPrefillKeepsTheWindow) {
  const KvStorage storage = GetParam().storage;
  constexpr int kWindow = 6;
  RotatingKVCache ring(kWindow, /*block_tokens=*/4, storage);
  KVCache full(4, storage);       // every token, stored the same way
  for (int p = 0; p < 11; ++p) {  // decode past the wrap
    const auto [k, v] = Token(p);
    ring.Update(k, v);
    full.Update(k, v);
  }
  const auto [k, v] = Tokens(11, 3);  // prefill after the wrap: the ring copy path
  ring.Update(k, v);
  full.Update(k, v);
  const KvView window = ring.View().Kv();  // the last kWindow - 1 tokens, oldest first
  ASSERT_EQ(window.Length(), kWindow - 1);
  const KvView all = full.State();
  const Tensor want_k = all.ConcatKeys().Slice(2, 14 - (kWindow - 1), 14);
  const Tensor want_v = all.ConcatValues().Slice(2, 14 - (kWindow - 1), 14);
  EXPECT_EQ(Bits(window.ConcatKeys()), Bits(want_k.Contiguous()));
  EXPECT_EQ(Bits(window.ConcatValues()), Bits(want_v.Contiguous()));
}

TEST_P(QuantizedCacheTest, BadInputChangesNothing) {
  KVCache cache(4, GetParam().storage);
  const auto [k, v] = Tokens(0, 2);
  cache.Update(k, v);
  const std::vector<std::uint32_t> before = Bits(cache.State().ConcatKeys());
  const Tensor wrong_heads = Tensor::Zeros(DType::kF32, {1, kHeads + 1, 1, kKeyDim});
  const Tensor values = Tensor::Zeros(DType::kF32, {1, kHeads + 1, 1, kValueDim});
  EXPECT_NE(ErrorOf([&] { cache.Update(wrong_heads, values); }).find("KVCache::Update"),
            std::string::npos);
  EXPECT_EQ(cache.Offset(), 2);
  EXPECT_EQ(Bits(cache.State().ConcatKeys()), before);
}

INSTANTIATE_TEST_SUITE_P(Storage, QuantizedCacheTest,
                         ::testing::Values(StorageCase{"int8", KvStorage::Same(DType::kI8)},
                                           StorageCase{"int4", KvStorage::Same(DType::kI4)},
                                           StorageCase{"int4h", KvStorage::Same(DType::kI4H)},
                                           StorageCase{"int8_k_int4_v",
                                                       KvStorage{DType::kI8, DType::kI4}}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(QuantizedStorageErrors, FloatWithQuantizedIsRefused) {
  const std::string message = ErrorOf([] { KVCache(4, KvStorage{DType::kF16, DType::kI8}); });
  EXPECT_NE(message.find("[KVCache] storage dtypes keys f16 / values int8"), std::string::npos)
      << message;
  EXPECT_NE(ErrorOf([] {
              RotatingKVCache(8, 4, KvStorage{DType::kF32, DType::kBF16});
            }).find("share"),
            std::string::npos);
}

TEST(QuantizedStorageErrors, Int4NeedsHeadDimMultipleOf32AtTheFirstUpdate) {
  KVCache cache(4, KvStorage{DType::kI8, DType::kI4});
  const Tensor k = Tensor::Zeros(DType::kF32, {1, 1, 1, 32});
  const Tensor v = Tensor::Zeros(DType::kF32, {1, 1, 1, 24});
  const std::string message = ErrorOf([&] { cache.Update(k, v); });
  EXPECT_NE(message.find("values dim 3 (head dim) is 24, but int4 storage needs a multiple of 32"),
            std::string::npos)
      << message;
  EXPECT_EQ(cache.Offset(), 0);
  EXPECT_TRUE(cache.State().Empty());
  // The cache is still free to take its layout from a valid first Update.
  cache.Update(k, Tensor::Zeros(DType::kF32, {1, 1, 1, 64}));
  EXPECT_EQ(cache.State().ValueDim(), 64);
}

TEST(QuantizedStorageErrors, StorageDtypeNamesOnlyAsharedDtype) {
  EXPECT_EQ(KVCache(4, DType::kI8).StorageDtype(), DType::kI8);
  EXPECT_EQ(KVCache(4, KvStorage{DType::kI8, DType::kI4}).StorageDtype(), std::nullopt);
  EXPECT_EQ(KVCache(4, KvStorage{DType::kI8, DType::kI4}).Storage(),
            (KvStorage{DType::kI8, DType::kI4}));
}

}  // namespace
}  // namespace ringkv::test
