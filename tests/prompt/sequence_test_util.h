#pragma once
// What the pooled prompt cache and sequence file tests share: CausalCaches of
// f32 K/V (stored exactly), a "model" whose K/V at position p depend on the
// whole token prefix [0, p] (so a sequence holding another prefix's K/V is
// caught even where the tokens agree), forward passes that store them, and the
// check that a sequence holds exactly the K/V a fresh sequence fed the same
// tokens would.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../../lib/src/prompt/sequence_snapshot_access.h"
#include "ringkv/causal_cache.h"
#include "ringkv/error.h"
#include "ringkv/sequence_file.h"

namespace ringkv::test {

inline constexpr std::int64_t kSeqHeads = 2;
inline constexpr std::int64_t kSeqKeyDim = 8;
inline constexpr std::int64_t kSeqValueDim = 4;

inline CausalCacheOptions SeqOptions(int layers, std::int64_t capacity_tokens,
                                     std::int64_t block_tokens, int max_sequences,
                                     Position window = 0) {
  CausalCacheOptions o;
  o.layers = layers;
  o.kv_heads = kSeqHeads;
  o.key_dim = kSeqKeyDim;
  o.value_dim = kSeqValueDim;
  o.dtype = DType::kF32;
  o.capacity_tokens = capacity_tokens;
  o.block_tokens = block_tokens;
  o.max_sequences = max_sequences;
  o.window = window;
  return o;
}

// A hash of tokens[0, p] per p.
inline std::vector<std::uint32_t> PrefixHashes(std::span<const int> tokens) {
  std::vector<std::uint32_t> out;
  std::uint32_t h = 2166136261u;
  for (const int t : tokens) {
    h = (h ^ static_cast<std::uint32_t>(t)) * 16777619u;
    h ^= h >> 15;
    out.push_back(h);
  }
  return out;
}

inline float KvValue(std::uint32_t prefix, int layer, std::int64_t head, std::int64_t d,
                     bool value) {
  std::uint32_t x = prefix ^ (static_cast<std::uint32_t>(layer) * 0x9E3779B9u) ^
                    (static_cast<std::uint32_t>(head) << 20) ^
                    (static_cast<std::uint32_t>(d) << 8) ^ (value ? 0x55u : 0u);
  x = x * 1664525u + 1013904223u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x >> 8) * 0x1p-23f - 1.0f;
}

// The model's K (value = false) or V of `tokens` at `positions`: [1, Hkv, n, dim].
inline Tensor ModelKv(std::span<const int> tokens, std::span<const Position> positions, int layer,
                      bool value) {
  const std::vector<std::uint32_t> h = PrefixHashes(tokens);
  const std::int64_t dim = value ? kSeqValueDim : kSeqKeyDim;
  const auto n = static_cast<std::int64_t>(positions.size());
  std::vector<float> out(static_cast<std::size_t>(kSeqHeads * n * dim));
  for (std::int64_t head = 0; head < kSeqHeads; ++head) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t prefix =
          h[static_cast<std::size_t>(positions[static_cast<std::size_t>(i)])];
      for (std::int64_t d = 0; d < dim; ++d) {
        out[static_cast<std::size_t>((head * n + i) * dim + d)] =
            KvValue(prefix, layer, head, d, value);
      }
    }
  }
  return Tensor::FromVector(out, {1, kSeqHeads, n, dim}, DType::kF32);
}

inline std::vector<Position> PositionRange(Position from, Position to) {
  std::vector<Position> out;
  for (Position p = from; p < to; ++p) out.push_back(p);
  return out;
}

// One forward pass: seq's tokens at positions [from, to) stored in every layer.
inline void Feed(CausalCache& cache, SequenceId seq, std::span<const int> tokens, Position from,
                 Position to) {
  const std::vector<Position> positions = PositionRange(from, to);
  const std::vector<SequenceId> sequences(positions.size(), seq);
  cache.StartForward(Batch{positions, sequences});
  for (int l = 0; l < cache.Options().layers; ++l) {
    cache.Update(l, ModelKv(tokens, positions, l, false), ModelKv(tokens, positions, l, true));
  }
}

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.GetShape() == b.GetShape() && a.Dtype() == b.Dtype() &&
         std::memcmp(a.Contiguous().Data(), b.Contiguous().Data(), a.NumBytes()) == 0;
}

// seq holds exactly the model's K/V of `tokens` at the positions it stores,
// and those positions end at tokens.size() - 1 (all of them without a window).
inline void ExpectHolds(const CausalCache& cache, SequenceId seq, std::span<const int> tokens) {
  const std::vector<Position> positions = cache.SequencePositions(seq);
  ASSERT_FALSE(positions.empty()) << "seq " << seq;
  ASSERT_EQ(positions.back() + 1, static_cast<Position>(tokens.size())) << "seq " << seq;
  if (cache.Options().window == 0) {
    ASSERT_EQ(positions, PositionRange(0, static_cast<Position>(tokens.size()))) << "seq " << seq;
  }
  const auto snapshot = cache.SnapshotSequence(seq);
  for (int l = 0; l < cache.Options().layers; ++l) {
    EXPECT_TRUE(SameBytes(detail::SequenceKeys(*snapshot, l), ModelKv(tokens, positions, l, false)))
        << "seq " << seq << " layer " << l << " keys";
    EXPECT_TRUE(
        SameBytes(detail::SequenceValues(*snapshot, l), ModelKv(tokens, positions, l, true)))
        << "seq " << seq << " layer " << l << " values";
  }
}

// LoadSequenceFromMemory(file, caches, dst)'s refusal, or "(loaded)".
inline std::string SequenceLoadRefusal(std::span<const std::byte> file,
                                       std::span<CausalCache* const> caches, SequenceId dst) {
  try {
    (void)LoadSequenceFromMemory(file, caches, dst);
  } catch (const SnapshotError& e) {
    return e.what();
  }
  return "(loaded)";
}

// Every file that differs from `valid` in one bit of one byte, and every
// truncation of it, is refused by name, leaving dst empty.
inline void ExpectEveryFlipAndTruncationRefused(const std::vector<std::byte>& valid,
                                                std::span<CausalCache* const> caches,
                                                SequenceId dst) {
  for (std::size_t i = 0; i < valid.size(); ++i) {
    std::vector<std::byte> file = valid;
    file[i] ^= std::byte{0x01};
    const std::string what = SequenceLoadRefusal(file, caches, dst);
    ASSERT_EQ(what.rfind("[LoadSequence] ", 0), 0u) << "byte " << i << ": " << what;
  }
  for (std::size_t size = 0; size < valid.size(); ++size) {
    const std::string what = SequenceLoadRefusal(std::span(valid).first(size), caches, dst);
    ASSERT_EQ(what.rfind("[LoadSequence] ", 0), 0u) << "size " << size << ": " << what;
  }
  for (const CausalCache* cache : caches) EXPECT_TRUE(cache->SequencePositions(dst).empty());
}

}  // namespace ringkv::test
