#include "ringkv/attention_mask.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/narrow>
#include <limits>
#include <vector>

#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

Tensor CheckedF32Array(const char* function, const Tensor& t) {
  if (t.Rank() != 4 || t.Dim(0) != 1) {
    throw ShapeError(fmt::format("[{}] mask shape {} must be [1, 1 or H, L or 1, K or 1]", function,
                                 t.GetShape()));
  }
  return t.AsType(DType::kF32);  // a fresh contiguous copy
}

std::size_t Index(const std::array<std::int64_t, 4>& dims, std::int64_t h, std::int64_t i,
                  std::int64_t j) {
  // Broadcasting read: an axis of size 1 is read at index 0.
  const std::int64_t hh = dims[1] == 1 ? 0 : h;
  const std::int64_t ii = dims[2] == 1 ? 0 : i;
  const std::int64_t jj = dims[3] == 1 ? 0 : j;
  return static_cast<std::size_t>((hh * dims[2] + ii) * dims[3] + jj);
}

}  // namespace

AttentionMask AttentionMask::Causal() {
  AttentionMask mask;
  mask.kind_ = Kind::kCausal;
  return mask;
}

AttentionMask AttentionMask::SlidingWindow(std::int64_t window) {
  if (window < 1) {
    throw Error(fmt::format("[AttentionMask::SlidingWindow] window {} must be >= 1", window));
  }
  AttentionMask mask;
  mask.kind_ = Kind::kSlidingWindow;
  mask.window_ = window;
  return mask;
}

AttentionMask AttentionMask::Additive(const Tensor& bias) {
  AttentionMask mask;
  mask.array_ = CheckedF32Array("AttentionMask::Additive", bias);
  return mask;
}

AttentionMask AttentionMask::Boolean(const Tensor& visible) {
  AttentionMask mask;
  mask.array_ = CheckedF32Array("AttentionMask::Boolean", visible);
  auto* data = static_cast<float*>(mask.array_.MutableData());
  for (std::int64_t n = 0; n < mask.array_.NumElements(); ++n) {
    data[n] = data[n] != 0.0f ? 0.0f : kMasked;
  }
  return mask;
}

AttentionMask AttentionMask::Intersect(const AttentionMask& other) const {
  AttentionMask result;
  // Structure: none < causal < sliding window (a window implies causal); two
  // windows give the smaller one.
  if (kind_ == Kind::kSlidingWindow && other.kind_ == Kind::kSlidingWindow) {
    result.kind_ = Kind::kSlidingWindow;
    result.window_ = std::min(window_, other.window_);
  } else if (kind_ == Kind::kSlidingWindow || other.kind_ == Kind::kSlidingWindow) {
    result.kind_ = Kind::kSlidingWindow;
    result.window_ = std::max(window_, other.window_);
  } else if (kind_ == Kind::kCausal || other.kind_ == Kind::kCausal) {
    result.kind_ = Kind::kCausal;
  }
  if (!HasArray() || !other.HasArray()) {
    result.array_ = HasArray() ? array_ : other.array_;
    return result;
  }
  // Both arrays: the sum (-inf in either hides the key), broadcast.
  std::array<std::int64_t, 4> a{}, b{}, out{};
  for (int axis = 0; axis < 4; ++axis) {
    const auto x = static_cast<std::size_t>(axis);
    a[x] = array_.Dim(axis);
    b[x] = other.array_.Dim(axis);
    if (a[x] != b[x] && a[x] != 1 && b[x] != 1) {
      throw ShapeError(
          fmt::format("[AttentionMask::Intersect] mask shapes {} and {} do not broadcast",
                      array_.GetShape(), other.array_.GetShape()));
    }
    out[x] = std::max(a[x], b[x]);
  }
  result.array_ = Tensor::Zeros(DType::kF32, {1, out[1], out[2], out[3]});
  auto* dst = static_cast<float*>(result.array_.MutableData());
  const auto* pa = static_cast<const float*>(array_.Data());
  const auto* pb = static_cast<const float*>(other.array_.Data());
  for (std::int64_t h = 0; h < out[1]; ++h) {
    for (std::int64_t i = 0; i < out[2]; ++i) {
      for (std::int64_t j = 0; j < out[3]; ++j) {
        dst[Index(out, h, i, j)] = pa[Index(a, h, i, j)] + pb[Index(b, h, i, j)];
      }
    }
  }
  return result;
}

Tensor AttentionMask::AsArray(std::int64_t query_len, std::int64_t key_len) const {
  if (query_len < 1 || key_len < query_len) {
    throw ShapeError(fmt::format(
        "[AttentionMask::AsArray] {} queries over {} keys: need 1 <= L <= K", query_len, key_len));
  }
  std::array<std::int64_t, 4> dims{1, 1, 1, 1};
  if (HasArray()) {
    for (int axis = 0; axis < 4; ++axis) dims[static_cast<std::size_t>(axis)] = array_.Dim(axis);
    if ((dims[2] != 1 && dims[2] != query_len) || (dims[3] != 1 && dims[3] != key_len)) {
      throw ShapeError(
          fmt::format("[AttentionMask::AsArray] mask shape {} does not fit {} queries over {} keys",
                      array_.GetShape(), query_len, key_len));
    }
  }
  const std::int64_t heads = dims[1];
  Tensor out = Tensor::Zeros(DType::kF32, {1, heads, query_len, key_len});
  auto* dst = static_cast<float*>(out.MutableData());
  const auto* src = HasArray() ? static_cast<const float*>(array_.Data()) : nullptr;
  const std::array<std::int64_t, 4> out_dims{1, heads, query_len, key_len};
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < query_len; ++i) {
      const std::int64_t position = key_len - query_len + i;
      for (std::int64_t j = 0; j < key_len; ++j) {
        bool visible = true;
        if (kind_ != Kind::kNone) visible = j <= position;
        if (kind_ == Kind::kSlidingWindow) visible = visible && j > position - window_;
        float value = visible ? 0.0f : kMasked;
        if (src != nullptr) value += src[Index(dims, h, i, j)];
        dst[Index(out_dims, h, i, j)] = value;
      }
    }
  }
  return out;
}

}  // namespace ringkv
