#include "recompute.h"

#include <chrono>

#include "attention_call.h"
#include "ringkv/tensor_ops.h"

namespace ringkv::model {
namespace {

class FullSequenceBackend final : public AttentionBackend {
 public:
  FullSequenceBackend(const ModelConfig& config, DType kv_rounding)
      : config_(config), kv_rounding_(kv_rounding) {}

  std::int64_t StartPosition() const override { return 0; }

  void Attend(int layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
              Context& ctx, Tensor& out, ForwardStats& stats) override {
    const AttentionMask mask = config_.KindOf(layer) == LayerKind::kGlobal
                                   ? AttentionMask::Causal()
                                   : AttentionMask::SlidingWindow(config_.window);
    // Rounded as the caches store them, so both see the same keys.
    const Tensor keys = AsStored(k, kv_rounding_), values = AsStored(v, kv_rounding_);
    const auto start = std::chrono::steady_clock::now();
    AttendFull(q, keys, values, mask, scale, ctx, out);
    stats.sdpa_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  const ModelConfig& config_;
  DType kv_rounding_;
};

}  // namespace

std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, ForwardStats* stats) {
  return RecomputeLogits(model, tokens, ctx, model.Config().kv_dtype, stats);
}

std::vector<float> RecomputeLogits(const TinyTransformer& model, std::span<const int> tokens,
                                   Context& ctx, DType kv_rounding, ForwardStats* stats) {
  FullSequenceBackend backend(model.Config(), kv_rounding);
  return model.Run(tokens, backend, ctx, LogitRows::kAll, stats);
}

}  // namespace ringkv::model
