#pragma once
// Helpers for the CausalCache tests. Every stored element of token (s, p)
// encodes it, so a test reads back which tokens a row sees and checks that no
// element was corrupted or taken from another layer:
//   K[0, h, t, d] = p (d == 0), s (d == 1), h * 16 + d + 100 * layer (d >= 2)
//   V[0, h, t, d] = -K[0, h, t, d] - 1

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "ringkv/batch_history.h"
#include "ringkv/causal_cache.h"
#include "ringkv/tensor.h"

namespace ringkv::test {

using Token = std::pair<SequenceId, Position>;  // (sequence, position)

inline float KeyElement(Token token, int layer, std::int64_t h, std::int64_t d) {
  if (d == 0) return static_cast<float>(token.second);
  if (d == 1) return static_cast<float>(token.first);
  return static_cast<float>(h * 16 + d + 100 * layer);
}
inline float ValueElement(Token token, int layer, std::int64_t h, std::int64_t d) {
  return -KeyElement(token, layer, h, d) - 1.0f;
}

// Keys [1, H, N, D] and values [1, H, N, Dv] of `tokens` (batch order) for `layer`.
inline std::pair<Tensor, Tensor> Encoded(const std::vector<Token>& tokens, int layer,
                                         const CausalCacheOptions& o, DType dtype = DType::kF32) {
  std::vector<float> k, v;
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t h = 0; h < o.kv_heads; ++h) {
    for (const Token& t : tokens) {
      for (std::int64_t d = 0; d < o.key_dim; ++d) k.push_back(KeyElement(t, layer, h, d));
    }
  }
  for (std::int64_t h = 0; h < o.kv_heads; ++h) {
    for (const Token& t : tokens) {
      for (std::int64_t d = 0; d < o.value_dim; ++d) v.push_back(ValueElement(t, layer, h, d));
    }
  }
  return {Tensor::FromVector(k, {1, o.kv_heads, n, o.key_dim}, dtype),
          Tensor::FromVector(v, {1, o.kv_heads, n, o.value_dim}, dtype)};
}

// The tokens a history's row sees, in key order; every element is checked
// against the encoding for `layer`.
inline std::vector<Token> SeenBy(const BatchHistory& history, std::int64_t row, int layer = 0) {
  const Tensor keys = history.VisibleKeys(row);
  const Tensor values = history.VisibleValues(row);
  const std::vector<float> k = keys.AsType(DType::kF32).ToVector();
  const std::vector<float> v = values.AsType(DType::kF32).ToVector();
  const std::int64_t heads = keys.Dim(1), n = keys.Dim(2), kd = keys.Dim(3), vd = values.Dim(3);
  std::vector<Token> seen;
  for (std::int64_t t = 0; t < n; ++t) {
    const Token token{static_cast<SequenceId>(k[static_cast<std::size_t>(t * kd + 1)]),
                      static_cast<Position>(k[static_cast<std::size_t>(t * kd)])};
    seen.push_back(token);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t d = 0; d < kd; ++d) {
        EXPECT_EQ(k[static_cast<std::size_t>((h * n + t) * kd + d)], KeyElement(token, layer, h, d))
            << "row " << row << " key " << t << " head " << h << " dim " << d;
      }
      for (std::int64_t d = 0; d < vd; ++d) {
        EXPECT_EQ(v[static_cast<std::size_t>((h * n + t) * vd + d)],
                  ValueElement(token, layer, h, d))
            << "row " << row << " value " << t << " head " << h << " dim " << d;
      }
    }
  }
  return seen;
}

// The positions-only expectation: the tokens of sequence s (held positions
// `held`, ascending) that a row at position q may see.
struct Rules {
  Position window = 0;
  Position chunk = 0;
};
inline std::vector<Token> Expected(SequenceId s, Position q, const std::vector<Position>& held,
                                   Rules rules, bool causal = true) {
  std::vector<Token> out;
  for (const Position p : held) {
    if (causal && p > q) continue;
    if (rules.window > 0 && std::int64_t{p} < std::int64_t{q} - rules.window) continue;
    if (rules.chunk > 0 && p < q - q % rules.chunk) continue;
    out.emplace_back(s, p);
  }
  return out;
}

inline std::vector<Position> Iota(Position first, Position end) {
  std::vector<Position> r;
  for (Position p = first; p < end; ++p) r.push_back(p);
  return r;
}

// A pass of `tokens` through every layer: StartForward, Update each layer with
// its encoding; returns layer 0's history.
inline BatchHistory Forward(CausalCache& cache, const std::vector<Token>& tokens) {
  std::vector<Position> positions;
  std::vector<SequenceId> sequences;
  for (const Token& t : tokens) {
    sequences.push_back(t.first);
    positions.push_back(t.second);
  }
  cache.StartForward({positions, sequences});
  BatchHistory first;
  for (int layer = 0; layer < cache.Options().layers; ++layer) {
    auto [k, v] = Encoded(tokens, layer, cache.Options());
    BatchHistory h = cache.Update(layer, k, v);
    if (layer == 0) first = h;
  }
  return first;
}

// `count` tokens of one sequence from position `first`.
inline std::vector<Token> Span(SequenceId s, Position first, Position count) {
  std::vector<Token> tokens;
  for (Position p = first; p < first + count; ++p) tokens.emplace_back(s, p);
  return tokens;
}

// Every row of the pass of `tokens` in progress sees exactly what the rules allow, on
// every layer (non_causal: the rows SetNonCausalRows was given).
inline void ExpectVisibility(CausalCache& cache, const std::vector<Token>& tokens, Rules rules,
                             const std::vector<std::int64_t>& non_causal = {}) {
  for (int layer = 0; layer < cache.Options().layers; ++layer) {
    const BatchHistory h = cache.Get(layer);
    ASSERT_EQ(h.Rows(), static_cast<std::int64_t>(tokens.size()));
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const auto [s, q] = tokens[r];
      const bool causal = std::find(non_causal.begin(), non_causal.end(),
                                    static_cast<std::int64_t>(r)) == non_causal.end();
      EXPECT_EQ(SeenBy(h, static_cast<std::int64_t>(r), layer),
                Expected(s, q, cache.SequencePositions(s), rules, causal))
          << "row " << r << " (sequence " << s << ", position " << q << ") layer " << layer;
    }
  }
}

inline CausalCacheOptions SmallOptions() {
  CausalCacheOptions o;
  o.layers = 2;
  o.kv_heads = 2;
  o.key_dim = 4;
  o.value_dim = 3;
  o.dtype = DType::kF32;
  o.block_tokens = 4;
  o.capacity_tokens = 64;
  o.max_sequences = 4;
  o.max_batch = 32;
  return o;
}

}  // namespace ringkv::test
