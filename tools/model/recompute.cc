#include "recompute.h"

#include <chrono>

#include "attention_call.h"

namespace ringkv::model {
namespace {

class FullSequenceBackend final : public AttentionBackend {
 public:
  explicit FullSequenceBackend(const ModelConfig& config) : config_(config) {}

  std::int64_t StartPosition() const override { return 0; }

  void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              Context& ctx, Tensor& out, ForwardStats& stats) override {
    const AttentionMask mask = config_.KindOf(layer) == LayerKind::kGlobal
                                   ? AttentionMask::Causal()
                                   : AttentionMask::SlidingWindow(config_.window);
    // Rounded to the K/V dtype as the caches store them, so both see the same keys.
    const Tensor keys = k.AsType(config_.kv_dtype), values = v.AsType(config_.kv_dtype);
    const auto start = std::chrono::steady_clock::now();
    AttendFull(q, keys, values, mask, scale, ctx, out);
    stats.sdpa_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  const ModelConfig& config_;
};

}  // namespace

std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, ForwardStats* stats) {
  FullSequenceBackend backend(model.Config());
  return model.Run(tokens, backend, ctx, LogitRows::kAll, stats);
}

}  // namespace ringkv::model
