#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <gsl/assert>
#include <gsl/narrow>
#include <vector>

namespace ringkv::model {

int Greedy(std::span<const float> logits) {
  Expects(!logits.empty());
  return gsl::narrow<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double Sampler::Uniform() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);  // SplitMix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int Sampler::Next(std::span<const float> logits) {
  if (temperature_ <= 0.0f) return Greedy(logits);
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    weights[i] = std::exp(static_cast<double>((logits[i] - top) / temperature_));
    total += weights[i];
  }
  double pick = Uniform() * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    pick -= weights[i];
    if (pick < 0) return gsl::narrow<int>(i);
  }
  return Greedy(logits);  // rounding left `pick` just above zero
}

}  // namespace ringkv::model
