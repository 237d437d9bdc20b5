#include "model_config.h"

#include <fmt/format.h>

#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv::model {
namespace {

void CheckRange(const char* name, int value, int low, int high) {
  if (value < low || value > high) {
    throw Error(fmt::format("[ModelConfig] {} is {}, expected {}..{}", name, value, low, high));
  }
}

}  // namespace

void ModelConfig::Validate() const {
  CheckRange("layers", layers, 1, kMaxLayers);
  CheckRange("d_model", d_model, 1, kMaxDModel);
  CheckRange("q_heads", q_heads, 1, kMaxHeads);
  CheckRange("kv_heads", kv_heads, 1, kMaxHeads);
  CheckRange("head_dim", head_dim, 1, kMaxHeadDim);
  CheckRange("mlp_hidden", mlp_hidden, 1, kMaxMlpHidden);
  CheckRange("vocab", vocab, 1, kMaxVocab);
  CheckRange("window", window, 1, kMaxWindow);
  if (q_heads % kv_heads != 0) {
    throw Error(fmt::format("[ModelConfig] q_heads {} is not a multiple of kv_heads {}", q_heads,
                            kv_heads));
  }
  if (head_dim % 2 != 0) {
    throw Error(fmt::format("[ModelConfig] head_dim {} must be even (rotary pairs)", head_dim));
  }
  if (!IsStorageDType(kv_dtype)) {
    throw Error(
        fmt::format("[ModelConfig] kv_dtype {} is not one of f32, f16, bf16, int8, int4, int4h",
                    static_cast<int>(kv_dtype)));
  }
  if (IsInt4(kv_dtype) && head_dim % kI4Group != 0) {
    throw Error(
        fmt::format("[ModelConfig] head_dim {} is not a multiple of {}, which kv_dtype "
                    "{} needs (scale groups)",
                    head_dim, kI4Group, kv_dtype));
  }
  if (global_every < 0) {
    throw Error(fmt::format("[ModelConfig] global_every is {}, expected >= 0", global_every));
  }
  if (!(rope_theta > 1.0f) || !(norm_eps > 0.0f)) {
    throw Error(fmt::format("[ModelConfig] rope_theta {} must be > 1 and norm_eps {} > 0",
                            rope_theta, norm_eps));
  }
}

LayerKind ModelConfig::KindOf(int layer) const {
  if (global_every > 0 && (layer + 1) % global_every == 0) return LayerKind::kGlobal;
  return LayerKind::kSliding;
}

int ModelConfig::GlobalLayers() const {
  int n = 0;
  for (int i = 0; i < layers; ++i) n += KindOf(i) == LayerKind::kGlobal ? 1 : 0;
  return n;
}

std::int64_t ModelConfig::ParameterCount() const {
  const std::int64_t d = d_model, q = std::int64_t{q_heads} * head_dim,
                     kv = std::int64_t{kv_heads} * head_dim, f = mlp_hidden, v = vocab;
  const std::int64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d;
  return layers * per_layer + 2 * v * d + d;
}

std::int64_t ModelConfig::KvBytesPerToken() const {
  return std::int64_t{kv_heads} * 2 * static_cast<std::int64_t>(RowBytes(kv_dtype, head_dim));
}

std::string ModelConfig::Describe() const {
  return fmt::format(
      "{} layers ({} global, {} sliding w={}), d_model {}, {} q heads / {} kv heads x {}, "
      "mlp {}, vocab {}, K/V {}, {:.1f}M params",
      layers, GlobalLayers(), layers - GlobalLayers(), window, d_model, q_heads, kv_heads, head_dim,
      mlp_hidden, vocab, kv_dtype, static_cast<double>(ParameterCount()) / 1e6);
}

}  // namespace ringkv::model
