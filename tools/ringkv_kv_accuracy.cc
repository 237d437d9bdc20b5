// What storing K/V in a narrower dtype costs in accuracy (docs/quantized_kv.md).
//
//   ringkv_kv_accuracy attention   attention output of f16, bf16, int8, int4,
//                                  int4h and mixed caches against f32 K/V, on
//                                  random K/V (plain, and with outlier key
//                                  channels) and on the tiny model's K/V (D 128)
//   ringkv_kv_accuracy logits      the tiny model's logits with int8 / int4 /
//                                  int4h (and bf16, f32) caches against its f16-cache run
//                                  over a long greedy generation, teacher-forced
//                                  on the f16 run's tokens
//
// Both go through the library's caches and Attention, so the quantized rows are
// read by the same kernels a decode loop uses.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attention_backend.h"
#include "attention_call.h"
#include "model_caches.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/kv_cache.h"
#include "sampling.h"
#include "tiny_transformer.h"

namespace {

using ringkv::Context;
using ringkv::DType;
using ringkv::KvStorage;
using ringkv::Tensor;

// q [1, Hq, L, D] and the history's k, v [1, Hkv, T, D], all f32; the L queries
// are the last L positions.
struct AttentionCase {
  std::string name;
  Tensor q, k, v;
};

std::string StorageName(const KvStorage& s) {
  return s.keys == s.values ? fmt::format("{}", s.keys)
                            : fmt::format("{} K + {} V", s.keys, s.values);
}

// Causal attention of c.q over K/V stored as `storage` in a KVCache.
Tensor AttendStored(const AttentionCase& c, const KvStorage& storage, Context& ctx) {
  ringkv::KVCache cache(ringkv::KVCache::kDefaultBlockTokens, storage);
  const ringkv::KVHistory history = cache.Update(c.k, c.v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.q.Dim(3)));
  return ringkv::Attention(c.q, history, ringkv::AttentionMask::Causal(), scale, ctx);
}

Tensor Gaussian(const ringkv::Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  for (float& x : values) x = dist(rng);
  return Tensor::FromVector(values, shape);
}

// Gaussian keys whose channels kOutlierChannels are kOutlierScale times larger in
// every head and token: the few large, fixed channels that the keys of trained
// models show (and that the tiny model's random weights do not produce).
constexpr int kOutlierChannels[] = {3, 37, 70, 101};
constexpr float kOutlierScale = 10.0f;

Tensor WithOutlierChannels(const Tensor& keys) {
  std::vector<float> values = keys.ToVector();
  const std::int64_t d = keys.Dim(3);
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (const int c : kOutlierChannels) {
      if (static_cast<std::int64_t>(i) % d == c) values[i] *= kOutlierScale;
    }
  }
  return Tensor::FromVector(values, keys.GetShape());
}

// The tiny model's q, k, v of every layer for one prompt, captured from a
// no-cache pass (full causal attention, so the pass itself is the f32 model).
class CaptureBackend final : public ringkv::model::AttentionBackend {
 public:
  explicit CaptureBackend(int queries) : queries_(queries) {}
  std::int64_t StartPosition() const override { return 0; }
  void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              Context& ctx, Tensor& out, ringkv::model::ForwardStats& /*stats*/) override {
    const std::int64_t t = q.Dim(2);
    // Copies, not views: the forward pass's tensors may live in its scratch, and
    // Contiguous() keeps a one-row slice as the view it already is.
    const Tensor last = q.Slice(2, t - queries_, t);
    cases.push_back({fmt::format("tiny model layer {}", layer),
                     Tensor::FromVector(last.ToVector(), last.GetShape()),
                     Tensor::FromVector(k.ToVector(), k.GetShape()),
                     Tensor::FromVector(v.ToVector(), v.GetShape())});
    ringkv::model::AttendFull(q, k, v, ringkv::AttentionMask::Causal(), scale, ctx, out);
  }
  std::vector<AttentionCase> cases;

 private:
  int queries_;
};

struct AttentionOptions {
  int tokens = 4096;
  int queries = 32;
  int q_heads = 16;
  int kv_heads = 4;
  int head_dim = 128;
  int model_layers = 4;
  int threads = 0;
  std::uint64_t seed = 1;
};

int RunAttention(const AttentionOptions& o) {
  Context ctx(o.threads);
  std::vector<AttentionCase> cases;
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  const std::int64_t t = o.tokens;
  cases.push_back({"random N(0, 1)", Gaussian({1, o.q_heads, o.queries, o.head_dim}, rng),
                   Gaussian({1, o.kv_heads, t, o.head_dim}, rng),
                   Gaussian({1, o.kv_heads, t, o.head_dim}, rng)});
  if (o.head_dim > kOutlierChannels[3]) {
    const AttentionCase& plain = cases.front();
    cases.push_back({fmt::format("random, 4 K channels x{}", kOutlierScale), plain.q,
                     WithOutlierChannels(plain.k), plain.v});
  }
  {
    ringkv::model::ModelConfig config;
    config.layers = o.model_layers;
    config.q_heads = o.q_heads;
    config.kv_heads = o.kv_heads;
    config.head_dim = o.head_dim;
    config.global_every = 1;
    config.kv_dtype = DType::kF32;
    config.seed = o.seed;
    const ringkv::model::TinyTransformer model(config, ctx);
    std::vector<int> prompt(static_cast<std::size_t>(o.tokens));
    std::uniform_int_distribution<int> token(0, config.vocab - 1);
    for (int& x : prompt) x = token(rng);
    CaptureBackend capture(o.queries);
    (void)model.Run(prompt, capture, ctx, ringkv::model::LogitRows::kLast, nullptr);
    for (AttentionCase& c : capture.cases) cases.push_back(std::move(c));
  }
  std::printf(
      "attention output error against f32 K/V: Hq %d, Hkv %d, D %d, T %d keys, the last %d "
      "queries (causal); |error| / RMS(f32 output)\n",
      o.q_heads, o.kv_heads, o.head_dim, o.tokens, o.queries);
  std::printf("%-26s %-16s %12s %12s\n", "K/V", "storage", "max", "mean");
  const std::vector<KvStorage> storages = {
      KvStorage::Same(DType::kF16),       KvStorage::Same(DType::kBF16),
      KvStorage::Same(DType::kI8),        KvStorage{DType::kI8, DType::kI4},
      KvStorage{DType::kI8, DType::kI4H}, KvStorage::Same(DType::kI4),
      KvStorage{DType::kI4H, DType::kI4}, KvStorage::Same(DType::kI4H)};
  for (const AttentionCase& c : cases) {
    const std::vector<float> ref = AttendStored(c, KvStorage::Same(DType::kF32), ctx).ToVector();
    double sum_sq = 0;
    for (const float x : ref) sum_sq += static_cast<double>(x) * static_cast<double>(x);
    const double rms = std::sqrt(sum_sq / static_cast<double>(ref.size()));
    for (const KvStorage& s : storages) {
      const std::vector<float> out = AttendStored(c, s, ctx).ToVector();
      double worst = 0, sum = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const double d = std::abs(static_cast<double>(out[i]) - static_cast<double>(ref[i]));
        worst = std::max(worst, d);
        sum += d;
      }
      std::printf("%-26s %-16s %12.3e %12.3e\n", c.name.c_str(), StorageName(s).c_str(),
                  worst / rms, sum / static_cast<double>(out.size()) / rms);
    }
  }
  return 0;
}

struct LogitOptions {
  int tokens = 2048;  // generated tokens compared
  int prompt = 32;
  int threads = 0;
  std::uint64_t seed = 1;
};

// Logit rows [steps, vocab] of a decode run on caches of `dtype`, fed `tokens`
// (the prompt in one forward, then one token a step): row i predicts token
// prompt + i + 1, the first row is the prompt's last.
std::vector<float> TeacherForced(ringkv::model::ModelConfig config, DType dtype,
                                 std::span<const int> tokens, int prompt, Context& ctx) {
  config.kv_dtype = dtype;
  const ringkv::model::TinyTransformer model(config, ctx);
  ringkv::model::ModelCaches caches(config);
  std::vector<float> rows =
      model.Forward(tokens.first(static_cast<std::size_t>(prompt)), caches.Layers(), ctx);
  for (std::size_t i = static_cast<std::size_t>(prompt); i + 1 < tokens.size(); ++i) {
    const std::vector<float> row = model.Forward(tokens.subspan(i, 1), caches.Layers(), ctx);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

int RunLogits(const LogitOptions& o) {
  Context ctx(o.threads);
  ringkv::model::ModelConfig config;  // the demo's default model
  config.seed = o.seed;
  config.kv_dtype = DType::kF16;
  const auto vocab = static_cast<std::size_t>(config.vocab);
  // The f16 run generates greedily; its tokens are every other run's input.
  std::vector<int> tokens(static_cast<std::size_t>(o.prompt));
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  std::uniform_int_distribution<int> token(0, config.vocab - 1);
  for (int& x : tokens) x = token(rng);
  std::vector<float> f16_rows;
  {
    const ringkv::model::TinyTransformer model(config, ctx);
    ringkv::model::ModelCaches caches(config);
    std::vector<float> row = model.Forward(tokens, caches.Layers(), ctx);
    for (int i = 0; i < o.tokens; ++i) {
      f16_rows.insert(f16_rows.end(), row.begin(), row.end());
      tokens.push_back(ringkv::model::Greedy(row));
      if (i + 1 < o.tokens) {
        row = model.Forward(std::span<const int>(&tokens.back(), 1), caches.Layers(), ctx);
      }
    }
  }
  std::printf(
      "tiny model (%s), seed %llu: logits with each K/V dtype against the f16-cache run, %d "
      "greedy steps after a %d-token prompt, teacher-forced on the f16 run's tokens\n",
      config.Describe().c_str(), static_cast<unsigned long long>(o.seed), o.tokens, o.prompt);
  double f16_sum_sq = 0;
  for (const float x : f16_rows) f16_sum_sq += static_cast<double>(x) * static_cast<double>(x);
  std::printf("f16 run: logit RMS %.3f\n",
              std::sqrt(f16_sum_sq / static_cast<double>(f16_rows.size())));
  std::printf("%-8s %12s %12s %18s\n", "K/V", "max |diff|", "mean |diff|", "greedy changes");
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kI8, DType::kI4, DType::kI4H}) {
    const std::vector<float> rows = TeacherForced(config, dtype, tokens, o.prompt, ctx);
    double worst = 0, sum = 0;
    int changed = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(o.tokens); ++r) {
      const std::span<const float> a = std::span<const float>(rows).subspan(r * vocab, vocab);
      const std::span<const float> b = std::span<const float>(f16_rows).subspan(r * vocab, vocab);
      for (std::size_t j = 0; j < vocab; ++j) {
        const double d = std::abs(static_cast<double>(a[j]) - static_cast<double>(b[j]));
        worst = std::max(worst, d);
        sum += d;
      }
      changed += ringkv::model::Greedy(a) != ringkv::model::Greedy(b) ? 1 : 0;
    }
    std::printf("%-8s %12.3e %12.3e %8d (%5.2f %%)\n", fmt::format("{}", dtype).c_str(), worst,
                sum / static_cast<double>(rows.size()), changed, 100.0 * changed / o.tokens);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "What storing K/V as f16, bf16, int8, int4 or int4h costs in accuracy "
      "(docs/quantized_kv.md).",
      "ringkv_kv_accuracy");
  app.require_subcommand(1);
  AttentionOptions a;
  CLI::App* attention = app.add_subcommand(
      "attention", "attention output error against f32 K/V, random and tiny-model K/V");
  attention->add_option("--tokens", a.tokens, "keys (T)")->capture_default_str();
  attention->add_option("--queries", a.queries, "query rows, the last positions")
      ->capture_default_str();
  attention->add_option("--q-heads", a.q_heads, "query heads")->capture_default_str();
  attention->add_option("--kv-heads", a.kv_heads, "K/V heads")->capture_default_str();
  attention->add_option("--head-dim", a.head_dim, "D (a multiple of 32, for int4)")
      ->capture_default_str();
  attention->add_option("--model-layers", a.model_layers, "tiny-model layers to capture")
      ->capture_default_str();
  attention->add_option("--threads", a.threads, "0: one per hardware thread")
      ->capture_default_str();
  attention->add_option("--seed", a.seed, "data and weights")->capture_default_str();
  LogitOptions l;
  CLI::App* logits = app.add_subcommand(
      "logits", "tiny-model logits with int8 / int4 / int4h caches against its f16-cache run");
  logits->add_option("--tokens", l.tokens, "greedy steps compared")->capture_default_str();
  logits->add_option("--prompt", l.prompt, "random prompt tokens")->capture_default_str();
  logits->add_option("--threads", l.threads, "0: one per hardware thread")->capture_default_str();
  logits->add_option("--seed", l.seed, "weights and prompt")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (attention->parsed()) {
      if (a.queries < 1 || a.queries > a.tokens || a.head_dim % 32 != 0) {
        throw ringkv::Error(fmt::format(
            "[ringkv_kv_accuracy] --queries {} must be in 1..--tokens {}, --head-dim {} a "
            "multiple of 32",
            a.queries, a.tokens, a.head_dim));
      }
      return RunAttention(a);
    }
    if (l.tokens < 1 || l.prompt < 1) {
      throw ringkv::Error(fmt::format(
          "[ringkv_kv_accuracy] --tokens {} and --prompt {} must be >= 1", l.tokens, l.prompt));
    }
    return RunLogits(l);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
