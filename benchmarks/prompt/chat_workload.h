#pragma once
// A synthetic chat workload for the prompt cache: a model-shaped stack of caches
// (8 layers, every 4th global, window 256, 2 kv heads x 64, f16) fed K/V by a
// stand-in forward pass (the point is the cache, not the arithmetic), many
// conversations of several turns sharing a system prompt.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "ringkv/layer_caches.h"
#include "ringkv/prompt_cache.h"

namespace ringkv::bench {

struct ChatShape {
  int layers = 8;
  int global_every = 4;
  int window = 256;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 64;
  int system_tokens = 512;
  int conversations = 16;
  int turns = 4;
  int user_tokens = 96;
  int reply_tokens = 48;

  std::size_t TokenBytes() const {  // one token, one layer (f16 K and V)
    return static_cast<std::size_t>(kv_heads * head_dim * 2 * 2);
  }
};

inline PromptCacheOptions ChatOptions(std::size_t budget) {  // the K/V layout comes from the caches
  PromptCacheOptions o;
  o.byte_budget = budget;
  o.fingerprint = "bench";
  return o;
}

// The stand-in forward: one Update per layer with K/V of the chunk's length.
class FakeModel {
 public:
  explicit FakeModel(const ChatShape& s) : s_(s) {}
  void Forward(LayerCaches& caches, std::span<const int> tokens) {
    const auto n = static_cast<std::int64_t>(tokens.size());
    const Tensor kv = Tensor::Zeros(DType::kF16, {1, s_.kv_heads, n, s_.head_dim});
    for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(kv, kv);
    evaluated_ += n;
  }
  std::int64_t Evaluated() const { return evaluated_; }

 private:
  ChatShape s_;
  std::int64_t evaluated_ = 0;
};

struct ChatResult {
  std::int64_t prompt_tokens = 0;  // Σ request lengths
  std::int64_t reused_tokens = 0;  // prefill skipped
  std::int64_t lookups = 0;
  std::int64_t hits = 0;
  double lookup_seconds = 0;
  std::size_t peak_bytes = 0;
  std::int64_t evictions = 0;
};

inline std::vector<int> Tokens(int first, int count) {
  std::vector<int> t(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) t[static_cast<std::size_t>(i)] = first + i;
  return t;
}

// Round-robin over the conversations, `turns` each; the system prompt is served
// and pinned first. Returns what the prompt cache saved.
inline ChatResult RunChat(const ChatShape& s, PromptCache& cache, LayerCaches& caches) {
  FakeModel model(s);
  ChatResult r;
  auto serve = [&](const std::vector<int>& prompt, int reply) {
    const auto t0 = std::chrono::steady_clock::now();
    const PrefixMatch m = cache.Lookup(prompt);
    r.lookup_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.prompt_tokens += static_cast<std::int64_t>(prompt.size());
    r.reused_tokens += m.reused;
    cache.Prefill(prompt, m, [&](std::span<const int> chunk) { model.Forward(caches, chunk); });
    std::vector<int> fed = prompt;
    for (int i = 0; i + 1 < reply; ++i) {  // the last reply token is sampled, not fed
      fed.push_back(1000000 + static_cast<int>(fed.size()));
      model.Forward(caches, std::span<const int>(&fed.back(), 1));
    }
    cache.Commit(fed);
    r.peak_bytes = std::max(r.peak_bytes, cache.Stats().bytes);
    fed.push_back(2000000);
    return fed;
  };
  const std::vector<int> system = Tokens(1, s.system_tokens);
  serve(system, 1);
  cache.Pin(system);
  std::vector<std::vector<int>> history(static_cast<std::size_t>(s.conversations), system);
  for (int turn = 0; turn < s.turns; ++turn) {
    for (int c = 0; c < s.conversations; ++c) {
      std::vector<int>& h = history[static_cast<std::size_t>(c)];
      const std::vector<int> user = Tokens(10000 * (c + 1) + 1000 * turn, s.user_tokens);
      h.insert(h.end(), user.begin(), user.end());
      h = serve(h, s.reply_tokens);
    }
  }
  const PromptCacheStats stats = cache.Stats();
  r.lookups = stats.lookups;
  r.hits = stats.hits;
  r.evictions = stats.evictions;
  return r;
}

// memcpy bandwidth (bytes/s) over a buffer larger than the L3, measured now.
inline double MemcpyBandwidth() {
  const std::size_t bytes = std::size_t{128} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s);
    a[static_cast<std::size_t>(rep)] = b[static_cast<std::size_t>(rep) + 1];
  }
  return best;
}

}  // namespace ringkv::bench
