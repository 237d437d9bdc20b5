#include "tiny_transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <gsl/assert>
#include <gsl/narrow>

#include "attention_call.h"
#include "matmul.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "rms_norm.h"

namespace ringkv::model {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A [1, H, L, D] view of a row-major [L, H, D] buffer: no copy.
template <class T>
Tensor HeadsView(T* x, std::int64_t len, std::int64_t heads, std::int64_t dim) {
  return Tensor::Borrow(x, DType::kF32, {len, heads, dim}).Permute({1, 0, 2}).Unsqueeze(0);
}

// The decode loop's backend: each layer's K/V goes into its cache, attention reads
// the history the cache returns, with the cache's own mask rule.
class CacheBackend final : public AttentionBackend {
 public:
  explicit CacheBackend(std::span<AttentionCache* const> caches) : caches_(caches) {}

  std::int64_t StartPosition() const override { return caches_.front()->Offset(); }

  // Update converts k and v to the cache's storage dtype in its copy into the blocks.
  void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              Context& ctx, Tensor& out, ForwardStats& stats) override {
    const auto update_start = Clock::now();
    const KVHistory history = caches_[gsl::narrow<std::size_t>(layer)]->Update(k, v);
    stats.cache_seconds += Since(update_start);
    const auto sdpa_start = Clock::now();
    AttendCached(q, history, scale, ctx, out);
    stats.sdpa_seconds += Since(sdpa_start);
  }

 private:
  std::span<AttentionCache* const> caches_;
};

}  // namespace

TinyTransformer::TinyTransformer(const ModelConfig& config, Context& ctx)
    : config_(config), weights_(RandomWeights(config, ctx.GetExecutor())) {}

void TinyTransformer::CheckTokens(const char* function, std::span<const int> tokens) const {
  if (tokens.empty()) throw Error(fmt::format("[{}] no tokens", function));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab) {
      throw Error(fmt::format("[{}] token {} at index {} is outside [0, vocab {})", function,
                              tokens[i], i, config_.vocab));
    }
  }
}

std::vector<float> TinyTransformer::Forward(std::span<const int> tokens,
                                            std::span<AttentionCache* const> caches, Context& ctx,
                                            LogitRows rows, ForwardStats* stats) const {
  CheckTokens("TinyTransformer::Forward", tokens);
  if (caches.size() != gsl::narrow<std::size_t>(config_.layers)) {
    throw Error(fmt::format("[TinyTransformer::Forward] {} caches for {} layers", caches.size(),
                            config_.layers));
  }
  for (std::size_t i = 0; i < caches.size(); ++i) {
    if (caches[i] != nullptr && caches[i]->StorageDtype() != config_.kv_dtype) {
      const std::optional<DType> stored = caches[i]->StorageDtype();
      throw Error(fmt::format(
          "[TinyTransformer::Forward] cache {} stores {}, but the model's K/V dtype is {} (build "
          "the caches with that storage dtype, as ModelCaches does)",
          i,
          stored.has_value() ? fmt::format("{}", *stored) : std::string("its first input's dtype"),
          config_.kv_dtype));
    }
    if (caches[i] == nullptr || caches[i]->Offset() != caches[0]->Offset()) {
      throw Error(
          fmt::format("[TinyTransformer::Forward] cache {} is {} but cache 0 is at offset {}", i,
                      caches[i] == nullptr ? std::string("null")
                                           : fmt::format("at offset {}", caches[i]->Offset()),
                      caches[0] == nullptr ? -1 : caches[0]->Offset()));
    }
  }
  CacheBackend backend(caches);
  return Run(tokens, backend, ctx, rows, stats);
}

std::vector<float> TinyTransformer::Run(std::span<const int> tokens, AttentionBackend& backend,
                                        Context& ctx, LogitRows rows, ForwardStats* stats) const {
  CheckTokens("TinyTransformer::Run", tokens);
  const RopeTable rope(backend.StartPosition(), gsl::narrow<std::int64_t>(tokens.size()),
                       config_.head_dim, config_.rope_theta);
  return Pass(tokens, rope, backend, ctx, rows, stats);
}

std::vector<float> TinyTransformer::RunAt(std::span<const int> tokens,
                                          std::span<const std::int64_t> positions,
                                          AttentionBackend& backend, Context& ctx, LogitRows rows,
                                          ForwardStats* stats) const {
  CheckTokens("TinyTransformer::RunAt", tokens);
  if (positions.size() != tokens.size()) {
    throw Error(fmt::format("[TinyTransformer::RunAt] {} positions for {} tokens", positions.size(),
                            tokens.size()));
  }
  for (std::size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0) {
      throw Error(fmt::format("[TinyTransformer::RunAt] position {} at index {} is negative",
                              positions[i], i));
    }
  }
  const RopeTable rope(positions, config_.head_dim, config_.rope_theta);
  return Pass(tokens, rope, backend, ctx, rows, stats);
}

std::vector<float> TinyTransformer::Pass(std::span<const int> tokens, const RopeTable& rope,
                                         AttentionBackend& backend, Context& ctx, LogitRows rows,
                                         ForwardStats* stats) const {
  const auto start = Clock::now();
  ForwardStats local;
  const auto len = gsl::narrow<std::int64_t>(tokens.size());
  const std::int64_t d = config_.d_model, hq = config_.q_heads, hkv = config_.kv_heads,
                     hd = config_.head_dim, f = config_.mlp_hidden;
  const auto n = [](std::int64_t a, std::int64_t b) { return gsl::narrow<std::size_t>(a * b); };
  kernels::Executor& pool = ctx.GetExecutor();

  std::vector<float> x(n(len, d)), h(n(len, d));                 // [L, d_model]
  std::vector<float> q(n(len, hq * hd)), attn(n(len, hq * hd));  // [L, Hq, D]
  std::vector<float> k(n(len, hkv * hd)), v(n(len, hkv * hd));   // [L, Hkv, D]
  std::vector<float> gate(n(len, f)), up(n(len, f));             // [L, mlp_hidden]
  // What attention reads and writes: views of those buffers, made once per pass.
  const Tensor q_heads = HeadsView(static_cast<const float*>(q.data()), len, hq, hd);
  const Tensor k_heads = HeadsView(static_cast<const float*>(k.data()), len, hkv, hd);
  const Tensor v_heads = HeadsView(static_cast<const float*>(v.data()), len, hkv, hd);
  Tensor attn_heads = HeadsView(attn.data(), len, hq, hd);
  for (std::int64_t i = 0; i < len; ++i) {
    const float* row = weights_.embedding.data.data() + tokens[gsl::narrow<std::size_t>(i)] * d;
    std::copy_n(row, d, x.data() + i * d);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int layer = 0; layer < config_.layers; ++layer) {
    const LayerWeights& w = weights_.layers[gsl::narrow<std::size_t>(layer)];
    RmsNorm(x, w.attn_norm, config_.norm_eps, h);
    MatMul(h, len, w.wq, q, pool);
    MatMul(h, len, w.wk, k, pool);
    MatMul(h, len, w.wv, v, pool);
    rope.Apply(q, config_.q_heads);
    rope.Apply(k, config_.kv_heads);
    backend.Attend(layer, q_heads, k_heads, v_heads, scale, ctx, attn_heads, local);
    MatMul(attn, len, w.wo, x, pool, Accumulate::kAdd);

    RmsNorm(x, w.mlp_norm, config_.norm_eps, h);
    MatMul(h, len, w.w_gate, gate, pool);
    MatMul(h, len, w.w_up, up, pool);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];  // SiLU(gate) * up
    }
    MatMul(gate, len, w.w_down, x, pool, Accumulate::kAdd);
  }

  const std::int64_t out_rows = rows == LogitRows::kAll ? len : 1;
  const std::span<const float> last(x.data() + (len - out_rows) * d, n(out_rows, d));
  std::vector<float> normed(last.size());
  RmsNorm(last, weights_.final_norm, config_.norm_eps, normed);
  std::vector<float> logits(n(out_rows, config_.vocab));
  MatMul(normed, out_rows, weights_.lm_head, logits, pool);

  local.total_seconds = Since(start);
  local.tokens = len;
  local.calls = 1;
  if (stats != nullptr) *stats += local;
  return logits;
}

}  // namespace ringkv::model
