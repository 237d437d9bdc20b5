#include "batch_forward.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <gsl/narrow>

#include "ringkv/batch_attention.h"
#include "ringkv/error.h"

namespace ringkv::model {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Each layer's K/V go into its pool; attention reads the batch history the pool
// returns, whose rows each see only their own sequence.
class PoolBackend final : public AttentionBackend {
 public:
  PoolBackend(ServingCaches& caches, std::int64_t first_position)
      : caches_(caches), first_position_(first_position) {}

  std::int64_t StartPosition() const override { return first_position_; }

  void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              Context& ctx, Tensor& out, ForwardStats& stats) override {
    const auto update_start = Clock::now();
    const BatchHistory history = caches_.PoolOf(layer).Update(caches_.IndexInPool(layer), k, v);
    stats.cache_seconds += Since(update_start);
    const auto sdpa_start = Clock::now();
    Attention(q, history, scale, ctx, out);
    stats.sdpa_seconds += Since(sdpa_start);
  }

 private:
  ServingCaches& caches_;
  std::int64_t first_position_;
};

}  // namespace

std::vector<float> ForwardBatch(const TinyTransformer& model, std::span<const int> tokens,
                                const Batch& batch, ServingCaches& caches, Context& ctx,
                                LogitRows rows, ForwardStats* stats) {
  if (tokens.empty() || batch.positions.size() != tokens.size() ||
      batch.sequences.size() != tokens.size()) {
    throw Error(fmt::format(
        "[ForwardBatch] tokens {}, positions {} and sequences {} must be as many, and not 0",
        tokens.size(), batch.positions.size(), batch.sequences.size()));
  }
  const int vocab = model.Config().vocab;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(fmt::format("[ForwardBatch] token {} at index {} is outside [0, vocab {})",
                              tokens[i], i, vocab));
    }
  }
  const auto start = Clock::now();
  caches.StartForward(batch);
  ForwardStats local;
  local.cache_seconds = Since(start);
  std::vector<std::int64_t> positions(batch.positions.begin(), batch.positions.end());
  PoolBackend backend(caches, positions.front());
  std::vector<float> logits = model.RunAt(tokens, positions, backend, ctx, rows, &local);
  local.total_seconds = Since(start);
  if (stats != nullptr) *stats += local;
  return logits;
}

}  // namespace ringkv::model
