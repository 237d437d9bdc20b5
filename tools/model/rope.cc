#include "rope.h"

#include <cmath>
#include <gsl/assert>
#include <gsl/narrow>

namespace ringkv::model {

namespace {

std::vector<std::int64_t> Consecutive(std::int64_t start, std::int64_t count) {
  Expects(start >= 0 && count >= 0);
  std::vector<std::int64_t> out(gsl::narrow<std::size_t>(count));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = start + gsl::narrow<std::int64_t>(i);
  return out;
}

}  // namespace

RopeTable::RopeTable(std::int64_t start, std::int64_t count, int head_dim, float theta)
    : RopeTable(Consecutive(start, count), head_dim, theta) {}

RopeTable::RopeTable(std::span<const std::int64_t> positions, int head_dim, float theta)
    : count_(gsl::narrow<std::int64_t>(positions.size())), half_(head_dim / 2) {
  Expects(head_dim >= 2 && head_dim % 2 == 0);
  const auto n = gsl::narrow<std::size_t>(count_ * half_);
  cos_.resize(n);
  sin_.resize(n);
  for (std::int64_t p = 0; p < count_; ++p) {
    const std::int64_t position = positions[gsl::narrow_cast<std::size_t>(p)];
    Expects(position >= 0);
    for (int i = 0; i < half_; ++i) {
      // In double: positions reach tens of thousands, where a float angle would
      // already have lost its low bits.
      const double freq =
          std::pow(static_cast<double>(theta), -2.0 * i / static_cast<double>(head_dim));
      const double angle = static_cast<double>(position) * freq;
      const auto at = gsl::narrow_cast<std::size_t>(p * half_ + i);
      cos_[at] = static_cast<float>(std::cos(angle));
      sin_[at] = static_cast<float>(std::sin(angle));
    }
  }
}

void RopeTable::Apply(std::span<float> x, int heads) const {
  const std::int64_t d = 2 * std::int64_t{half_};
  Expects(x.size() == gsl::narrow<std::size_t>(count_ * heads * d));
  for (std::int64_t p = 0; p < count_; ++p) {
    const float* c = cos_.data() + p * half_;
    const float* s = sin_.data() + p * half_;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x.data() + (p * heads + h) * d;
      for (int i = 0; i < half_; ++i) {
        const float a = v[i], b = v[i + half_];
        v[i] = a * c[i] - b * s[i];
        v[i + half_] = a * s[i] + b * c[i];
      }
    }
  }
}

}  // namespace ringkv::model
