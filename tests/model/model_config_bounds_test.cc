// ModelConfig's upper bounds: every size is capped, so that the parameter count
// and buffer sizes of any configuration that validates fit 64-bit arithmetic.
#include <gtest/gtest.h>

#include <string>

#include "model_config.h"
#include "ringkv/error.h"

namespace ringkv::model::test {
namespace {

TEST(ModelConfig, EverySizeHasAnUpperBound) {
  struct Case {
    int ModelConfig::*field;
    const char* name;
    int max;
  };
  for (const Case& c : {Case{&ModelConfig::layers, "layers", ModelConfig::kMaxLayers},
                        Case{&ModelConfig::d_model, "d_model", ModelConfig::kMaxDModel},
                        Case{&ModelConfig::q_heads, "q_heads", ModelConfig::kMaxHeads},
                        Case{&ModelConfig::kv_heads, "kv_heads", ModelConfig::kMaxHeads},
                        Case{&ModelConfig::head_dim, "head_dim", ModelConfig::kMaxHeadDim},
                        Case{&ModelConfig::mlp_hidden, "mlp_hidden", ModelConfig::kMaxMlpHidden},
                        Case{&ModelConfig::vocab, "vocab", ModelConfig::kMaxVocab},
                        Case{&ModelConfig::window, "window", ModelConfig::kMaxWindow}}) {
    ModelConfig config;
    config.*c.field = c.max + 1;
    try {
      config.Validate();
      ADD_FAILURE() << c.name << " " << c.max + 1 << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "[ModelConfig] " + std::string(c.name) + " is " +
                                           std::to_string(c.max + 1) + ", expected 1.." +
                                           std::to_string(c.max));
    }
  }
}

// The largest configuration that validates still has a parameter count in range.
TEST(ModelConfig, LargestConfigurationCountsInRange) {
  ModelConfig config;
  config.layers = ModelConfig::kMaxLayers;
  config.d_model = ModelConfig::kMaxDModel;
  config.q_heads = config.kv_heads = ModelConfig::kMaxHeads;
  config.head_dim = ModelConfig::kMaxHeadDim;
  config.mlp_hidden = ModelConfig::kMaxMlpHidden;
  config.vocab = ModelConfig::kMaxVocab;
  EXPECT_NO_THROW(config.Validate());
  const double d = config.d_model, f = config.mlp_hidden,
               q = static_cast<double>(config.q_heads) * config.head_dim;
  const double expected =
      config.layers * (d * q + 2 * d * q + q * d + 3 * d * f + 2 * d) + 2.0 * config.vocab * d + d;
  EXPECT_EQ(static_cast<double>(config.ParameterCount()), expected);
  EXPECT_EQ(static_cast<double>(config.WeightBytes()), 4 * expected);
}

}  // namespace
}  // namespace ringkv::model::test
