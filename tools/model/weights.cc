#include "weights.h"

#include <cmath>
#include <cstdint>
#include <gsl/narrow>

namespace ringkv::model {
namespace {

// SplitMix64: a tiny, fast, well-mixed generator; one stream per matrix.
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) from the top 24 bits.
  float Symmetric() { return static_cast<float>(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }

 private:
  std::uint64_t state_;
};

// Uniform with the given standard deviation: U(-a, a) has variance a² / 3.
void Fill(std::vector<float>& out, std::uint64_t stream, float stddev) {
  SplitMix rng(stream);
  const float a = stddev * std::sqrt(3.0f);
  for (float& x : out) x = a * rng.Symmetric();
}

// RMSNorm gains near 1, so the norm does not hide bugs that a gain of exactly 1 would.
void FillGain(std::vector<float>& out, std::uint64_t stream) {
  SplitMix rng(stream);
  for (float& x : out) x = 1.0f + 0.1f * rng.Symmetric();
}

struct Job {
  std::vector<float>* data;
  float stddev;  // < 0: a norm gain
};

}  // namespace

Weights RandomWeights(const ModelConfig& config, kernels::Executor& pool) {
  config.Validate();
  const std::int64_t d = config.d_model, q = std::int64_t{config.q_heads} * config.head_dim,
                     kv = std::int64_t{config.kv_heads} * config.head_dim, f = config.mlp_hidden,
                     vocab = config.vocab;
  const auto shape = [](Matrix& m, std::int64_t rows, std::int64_t cols) {
    m.rows = rows;
    m.cols = cols;
    m.data.resize(gsl::narrow<std::size_t>(rows * cols));
  };
  const float in_d = 1.0f / std::sqrt(static_cast<float>(d));
  const float residual = 1.0f / std::sqrt(2.0f * static_cast<float>(config.layers));

  Weights w;
  std::vector<Job> jobs;
  shape(w.embedding, vocab, d);
  jobs.push_back({&w.embedding.data, 1.0f});
  w.layers.resize(gsl::narrow<std::size_t>(config.layers));
  for (LayerWeights& layer : w.layers) {
    layer.attn_norm.resize(gsl::narrow<std::size_t>(d));
    layer.mlp_norm.resize(gsl::narrow<std::size_t>(d));
    shape(layer.wq, q, d);
    shape(layer.wk, kv, d);
    shape(layer.wv, kv, d);
    shape(layer.wo, d, q);
    shape(layer.w_gate, f, d);
    shape(layer.w_up, f, d);
    shape(layer.w_down, d, f);
    jobs.push_back({&layer.attn_norm, -1.0f});
    jobs.push_back({&layer.wq.data, in_d});
    jobs.push_back({&layer.wk.data, in_d});
    jobs.push_back({&layer.wv.data, in_d});
    jobs.push_back({&layer.wo.data, residual / std::sqrt(static_cast<float>(q))});
    jobs.push_back({&layer.mlp_norm, -1.0f});
    jobs.push_back({&layer.w_gate.data, in_d});
    // SwiGLU's product of two O(1) factors has a larger spread; the up projection
    // is a little smaller so that the MLP output stays O(1).
    jobs.push_back({&layer.w_up.data, 0.7f * in_d});
    jobs.push_back({&layer.w_down.data, residual / std::sqrt(static_cast<float>(f))});
  }
  w.final_norm.resize(gsl::narrow<std::size_t>(d));
  jobs.push_back({&w.final_norm, -1.0f});
  shape(w.lm_head, vocab, d);
  jobs.push_back({&w.lm_head.data, 2.0f * in_d});

  pool.Run(jobs.size(), [&](std::size_t i, int) {
    const std::uint64_t stream = config.seed * 0x100000001B3ull + i * 0x9E3779B97F4A7C15ull;
    if (jobs[i].stddev < 0) {
      FillGain(*jobs[i].data, stream);
    } else {
      Fill(*jobs[i].data, stream, jobs[i].stddev);
    }
  });
  return w;
}

}  // namespace ringkv::model
