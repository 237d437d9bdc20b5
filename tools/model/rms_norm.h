#pragma once
// RMSNorm: y = x / sqrt(mean(x²) + eps) * weight, row by row.

#include <cstdint>
#include <span>

namespace ringkv::model {

// x and y [rows, weight.size()] (may alias).
void RmsNorm(std::span<const float> x, std::span<const float> weight, float eps,
             std::span<float> y);

}  // namespace ringkv::model
