#pragma once
// Picking the next token from a row of logits: greedy (argmax) or seeded
// temperature sampling, reproducible for a given seed.

#include <cstdint>
#include <span>

namespace ringkv::model {

// Index of the largest logit (the first one on ties).
int Greedy(std::span<const float> logits);

class Sampler {
 public:
  // temperature <= 0 means greedy.
  Sampler(float temperature, std::uint64_t seed) : temperature_(temperature), state_(seed) {}

  int Next(std::span<const float> logits);

 private:
  double Uniform();  // [0, 1)

  float temperature_;
  std::uint64_t state_;
};

}  // namespace ringkv::model
