// The K/V layout (dtype, kv heads, key and value dims) comes from the caches:
// every file Save writes loads back into an identical set-up, whatever the
// layout, and a Commit of K/V in another layout than the cached snapshots is
// refused with nothing changed (a later eviction would otherwise merge spans of
// two layouts).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

constexpr std::size_t kLots = std::size_t{1} << 30;

struct LayerSpec {
  int window = 0;  // 0: a KVCache, else a RotatingKVCache of that window
  DType dtype = DType::kF32;
  std::int64_t heads = 1;
  std::int64_t k_dim = 1;
  std::int64_t v_dim = 1;
};

struct Stack {
  const char* name;
  std::int64_t block_tokens;
  std::vector<LayerSpec> layers;
};

void PrintTo(const Stack& s, std::ostream* os) { *os << s.name; }

LayerCaches Build(const Stack& s) {
  std::vector<LayerCaches::Layer> layers;
  for (const LayerSpec& l : s.layers) {
    if (l.window == 0) {
      layers.emplace_back(std::in_place_type<KVCache>, s.block_tokens);
    } else {
      layers.emplace_back(std::in_place_type<RotatingKVCache>, l.window, s.block_tokens);
    }
  }
  return LayerCaches(std::move(layers));
}

// K/V for `tokens` at the caches' offset, in each layer's own layout; values
// depend on (layer, position, token, head, element) so any mix-up shows.
void Forward(const Stack& s, LayerCaches& caches, std::span<const int> tokens) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSpec& spec = s.layers[l];
    const int offset = caches[l].Offset();
    auto make = [&](std::int64_t dim, float sign) {
      std::vector<float> v;
      for (std::int64_t h = 0; h < spec.heads; ++h) {
        for (std::int64_t i = 0; i < n; ++i) {
          for (std::int64_t d = 0; d < dim; ++d) {
            const int t = tokens[static_cast<std::size_t>(i)];
            v.push_back(sign * static_cast<float>((offset + i) * 3 + t % 17 + h * 5 + d +
                                                  static_cast<std::int64_t>(l) * 7));
          }
        }
      }
      return Tensor::FromVector(v, {1, spec.heads, n, dim}, spec.dtype);
    };
    caches[l].Update(make(spec.k_dim, 1.0f), make(spec.v_dim, -1.0f));
  }
}

PrefixMatch ServeIn(const Stack& s, PromptCache& pc, LayerCaches& caches,
                    const std::vector<int>& tokens) {
  const PrefixMatch match = pc.Lookup(tokens);
  pc.Prefill(tokens, match, [&](std::span<const int> chunk) { Forward(s, caches, chunk); });
  pc.Commit(tokens);
  ExpectBytes(pc);
  return match;
}

// What each layer holds, as floats (exact for every dtype).
std::vector<std::vector<float>> Held(LayerCaches& caches) {
  std::vector<std::vector<float>> out;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    KvView view;
    if (auto* ring = dynamic_cast<RotatingKVCache*>(&caches[l])) {
      view = ring->View().Kv();
    } else {
      view = dynamic_cast<KVCache&>(caches[l]).View().Kv();
    }
    std::vector<float> both;
    if (!view.Empty()) {
      both = view.ConcatKeys().ToVector();
      const std::vector<float> v = view.ConcatValues().ToVector();
      both.insert(both.end(), v.begin(), v.end());
    }
    out.push_back(std::move(both));
  }
  return out;
}

PromptCacheOptions Plain(std::size_t budget) {
  PromptCacheOptions o;  // no layout: it comes from the caches
  o.byte_budget = budget;
  o.fingerprint = "layout-test";
  return o;
}

class EveryLayout : public ::testing::TestWithParam<Stack> {};

TEST_P(EveryLayout, WhatSaveWritesLoadsBack) {
  const Stack& s = GetParam();
  ScratchDir dir;
  LayerCaches source_caches = Build(s);
  PromptCache source(source_caches, Plain(kLots));
  const std::vector<int> system = Seq(100, 7);
  const std::vector<std::vector<int>> requests = {
      system, Cat(system, Seq(200, 6)), Cat(system, Seq(300, 9)), Cat(system, Seq(300, 9)),
      Cat(Seq(100, 3), {5, 6})};
  for (const auto& r : requests) ServeIn(s, source, source_caches, r);
  source.Pin(system);
  const std::string path = dir.File("cache.safetensors");
  source.Save(path);
  const std::string entry = dir.File("entry.safetensors");
  source.SaveEntry(entry, Cat(system, Seq(300, 9)));

  for (const std::string& file : {path, entry}) {
    LayerCaches caches = Build(s);
    PromptCache loaded(caches, Plain(kLots));
    ASSERT_NO_THROW(loaded.Load(file)) << s.name << " " << file;
    const std::vector<PromptNodeInfo> a = loaded.Nodes();
    ASSERT_FALSE(a.empty());
    // Every cached prefix restores the same K/V as in the prompt cache that saved it.
    for (const auto& r : requests) {
      if (file == entry && r != Cat(system, Seq(300, 9))) continue;
      std::vector<int> next = r;
      next.push_back(1);
      const PrefixMatch from_file = loaded.Lookup(next);
      const PrefixMatch from_source = source.Lookup(next);
      ASSERT_EQ(from_file.reused, from_source.reused) << s.name;
      EXPECT_EQ(Held(caches), Held(source_caches)) << s.name;
    }
    // And what was loaded saves and loads again.
    const std::string again = dir.File("again.safetensors");
    loaded.Save(again);
    LayerCaches caches2 = Build(s);
    PromptCache twice(caches2, Plain(kLots));
    ASSERT_NO_THROW(twice.Load(again)) << s.name;
    EXPECT_EQ(twice.Nodes().size(), a.size());
  }
}

TEST_P(EveryLayout, AnEmptyCacheSavesAndLoads) {
  const Stack& s = GetParam();
  ScratchDir dir;
  LayerCaches caches = Build(s);
  PromptCache empty(caches, Plain(kLots));
  empty.Save(dir.File("empty.safetensors"));
  LayerCaches other = Build(s);
  PromptCache loaded(other, Plain(kLots));
  ASSERT_NO_THROW(loaded.Load(dir.File("empty.safetensors")));
  EXPECT_TRUE(loaded.Nodes().empty());
}

const LayerSpec kGlobalF32{0, DType::kF32, 2, 3, 5};
const LayerSpec kSlidingF32{4, DType::kF32, 2, 3, 5};

INSTANTIATE_TEST_SUITE_P(
    Layouts, EveryLayout,
    ::testing::Values(
        Stack{"f32_heads2_dims3x5_mixed", 4, {kSlidingF32, kGlobalF32, kSlidingF32}},
        Stack{"f16_heads1_dim8_global", 4, {{0, DType::kF16, 1, 8, 8}, {0, DType::kF16, 1, 8, 8}}},
        Stack{"bf16_heads3_dims4x2_sliding",
              3,
              {{5, DType::kBF16, 3, 4, 2}, {5, DType::kBF16, 3, 4, 2}}},
        // Layers of different layouts in one stack.
        Stack{"per_layer_layouts",
              256,
              {{4, DType::kF16, 2, 4, 4}, {0, DType::kF32, 1, 6, 2}, {0, DType::kBF16, 4, 2, 2}}}),
    [](const ::testing::TestParamInfo<Stack>& p) { return std::string(p.param.name); });

// The caches now hold K/V of another dtype than the trie's snapshots.
TEST(PromptLayout, CommitRefusesAnotherLayoutWithNothingChanged) {
  const Stack f32{"f32", 4, {kSlidingF32, kGlobalF32}};
  Stack f16 = f32;
  for (LayerSpec& l : f16.layers) l.dtype = DType::kF16;
  LayerCaches caches = Build(f32);
  PromptCache pc(caches, Plain(kLots));
  const std::vector<int> a = Seq(10, 6);
  ServeIn(f32, pc, caches, a);
  const std::vector<PromptNodeInfo> before = pc.Nodes();
  const PromptCacheStats stats_before = pc.Stats();
  // The caller frees the caches and feeds f16 K/V for a continuation of `a`.
  caches.Free();
  Forward(f16, caches, Cat(a, Seq(50, 4)));
  try {
    pc.Commit(Cat(a, Seq(50, 4)));
    FAIL() << "a commit of f16 K/V into a trie of f32 snapshots must throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[PromptCache::Commit] layer 0", 0), 0u) << what;
    EXPECT_NE(what.find("f16"), std::string::npos) << what;
    EXPECT_NE(what.find("f32"), std::string::npos) << what;
  }
  const std::vector<PromptNodeInfo> after = pc.Nodes();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].tokens, before[i].tokens);
    EXPECT_EQ(after[i].bytes, before[i].bytes);
    EXPECT_EQ(after[i].last_used, before[i].last_used);
  }
  EXPECT_EQ(pc.Stats().bytes, stats_before.bytes);
  EXPECT_EQ(pc.Stats().splits, stats_before.splits);
  ExpectBytes(pc);

  // The prompt cache still serves its own layout.
  caches.Free();
  EXPECT_EQ(ServeIn(f32, pc, caches, Cat(a, {1, 2})).reused, 6);
}

// A checkpoint (windows captured mid-prefill) in another layout is refused too.
TEST(PromptLayout, CheckpointRefusesAnotherLayout) {
  const Stack f32{"f32", 4, {kSlidingF32, kGlobalF32}};
  Stack f16 = f32;
  for (LayerSpec& l : f16.layers) l.dtype = DType::kF16;
  LayerCaches caches = Build(f32);
  PromptCache pc(caches, Plain(kLots));
  ServeIn(f32, pc, caches, Seq(10, 6));
  const std::size_t bytes = pc.Stats().bytes;
  caches.Free();
  Forward(f16, caches, Seq(10, 3));
  EXPECT_THROW(pc.Checkpoint(), Error);
  EXPECT_EQ(pc.Stats().bytes, bytes);
  ExpectBytes(pc);
}

// The scenario of the issue: a stale branch point whose only child holds K/V of
// another dtype is merged by eviction. The commit that would build it is refused,
// so the merge never sees two layouts, and evictions keep the trie walkable.
TEST(PromptLayout, EvictionAfterARefusedCommitKeepsTheTrieSound) {
  const Stack f32{"f32", 4, {kGlobalF32, kGlobalF32}};
  Stack f16 = f32;
  for (LayerSpec& l : f16.layers) l.dtype = DType::kF16;
  LayerCaches caches = Build(f32);
  const std::size_t per_token = 2 * 2 * (3 + 5) * 4;  // 2 layers x heads x (k + v) x f32
  PromptCache pc(caches, Plain(60 * per_token));
  const std::vector<int> a = Seq(10, 8);
  ServeIn(f32, pc, caches, a);
  caches.Free();
  Forward(f16, caches, Cat(a, Seq(50, 8)));
  EXPECT_THROW(pc.Commit(Cat(a, Seq(50, 8))), Error);
  caches.Free();
  for (int i = 0; i < 12; ++i) ServeIn(f32, pc, caches, Cat(Seq(1000 + 10 * i, 4), Seq(7, 6)));
  EXPECT_GT(pc.Stats().evictions, 0);
  for (const PromptNodeInfo& n : pc.Nodes()) EXPECT_FALSE(n.tokens.empty());
  ExpectBytes(pc);
}

}  // namespace
}  // namespace ringkv::test
