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

// Whether freeing q [q_lo, q_hi) x k [k_lo, k_hi) from causality changes any
// cell: not when it is empty, nor when every key in it is at or before its first
// query (k_hi - 1 <= q_lo), where causality already shows it.
bool FreesCells(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo, std::int64_t k_hi) {
  return q_lo < q_hi && k_lo < k_hi && k_hi - 1 > q_lo;
}

std::int64_t CheckedWindow(const char* function, std::int64_t window) {
  if (window < 1) throw Error(fmt::format("[{}] window {} must be >= 1", function, window));
  return window;
}

}  // namespace

AttentionMask AttentionMask::Causal() {
  AttentionMask mask;
  mask.causal_ = true;
  return mask;
}

AttentionMask AttentionMask::WindowOnly(std::int64_t window) {
  AttentionMask mask;
  mask.window_ = CheckedWindow("AttentionMask::WindowOnly", window);
  return mask;
}

AttentionMask AttentionMask::SlidingWindow(std::int64_t window) {
  AttentionMask mask;
  mask.causal_ = true;
  mask.window_ = CheckedWindow("AttentionMask::SlidingWindow", window);
  return mask;
}

AttentionMask::Kind AttentionMask::StructuralKind() const noexcept {
  if (window_ == 0) return causal_ ? Kind::kCausal : Kind::kNone;
  return causal_ ? Kind::kSlidingWindow : Kind::kWindow;
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

AttentionMask AttentionMask::Relax(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo,
                                   std::int64_t k_hi) const {
  if (!causal_) {
    throw Error(fmt::format(
        "[AttentionMask::Relax] the mask ({}) has no causal part to relax; a window or an "
        "array is not relaxed (edit the array itself)",
        IsZero() ? "zero" : (window_ != 0 ? "window only" : "array only")));
  }
  if (q_lo < 0 || q_hi < 0 || k_lo < 0 || k_hi < 0) {
    throw Error(fmt::format(
        "[AttentionMask::Relax] rectangle q [{}, {}) x k [{}, {}) has a negative position", q_lo,
        q_hi, k_lo, k_hi));
  }
  AttentionMask result = *this;
  if (!FreesCells(q_lo, q_hi, k_lo, k_hi)) return result;
  const Rectangle rect{q_lo, q_hi, k_lo, k_hi};
  if (std::find(relaxed_.begin(), relaxed_.end(), rect) == relaxed_.end()) {
    result.relaxed_.push_back(rect);
  }
  return result;
}

AttentionMask AttentionMask::Intersect(const AttentionMask& other) const {
  AttentionMask result;
  result.causal_ = causal_ || other.causal_;
  if (window_ != 0 && other.window_ != 0) {
    result.window_ = std::min(window_, other.window_);
  } else {
    result.window_ = window_ != 0 ? window_ : other.window_;
  }
  // A cell is free of causality in the result only if neither side's causal
  // part hides it: both relaxed -> the pairwise overlaps; one relaxed and the
  // other without causality -> the relaxed side's cells; one side plain causal
  // -> none.
  if (!relaxed_.empty() && !other.relaxed_.empty()) {
    for (const Rectangle& a : relaxed_) {
      for (const Rectangle& b : other.relaxed_) {
        const Rectangle o{std::max(a.q_lo, b.q_lo), std::min(a.q_hi, b.q_hi),
                          std::max(a.k_lo, b.k_lo), std::min(a.k_hi, b.k_hi)};
        if (FreesCells(o.q_lo, o.q_hi, o.k_lo, o.k_hi) &&
            std::find(result.relaxed_.begin(), result.relaxed_.end(), o) == result.relaxed_.end()) {
          result.relaxed_.push_back(o);
        }
      }
    }
  } else if (!relaxed_.empty() && !other.causal_) {
    result.relaxed_ = relaxed_;
  } else if (!other.relaxed_.empty() && !causal_) {
    result.relaxed_ = other.relaxed_;
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

Tensor AttentionMask::AsArray(std::int64_t query_len, std::int64_t key_len,
                              std::int64_t first_position) const {
  if (query_len < 1 || key_len < query_len) {
    throw ShapeError(fmt::format(
        "[AttentionMask::AsArray] {} queries over {} keys: need 1 <= L <= K", query_len, key_len));
  }
  if (first_position < 0) {
    throw ShapeError(
        fmt::format("[AttentionMask::AsArray] first_position {} must be >= 0", first_position));
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
  // [L, K] structure in positions relative to the oldest key: 0 visible, -inf hidden.
  std::vector<float> structure(static_cast<std::size_t>(query_len * key_len), 0.0f);
  const auto cell = [&](std::int64_t i, std::int64_t j) -> float& {
    return structure[static_cast<std::size_t>(i * key_len + j)];
  };
  const std::int64_t first_query = key_len - query_len;  // relative position of query 0
  if (causal_) {
    for (std::int64_t i = 0; i < query_len; ++i) {
      for (std::int64_t j = first_query + i + 1; j < key_len; ++j) cell(i, j) = kMasked;
    }
  }
  for (const Rectangle& r : relaxed_) {
    // Absolute -> relative, clipped to the [L, K] grid.
    const std::int64_t i_lo =
        std::clamp(r.q_lo - first_position - first_query, std::int64_t{0}, query_len);
    const std::int64_t i_hi =
        std::clamp(r.q_hi - first_position - first_query, std::int64_t{0}, query_len);
    const std::int64_t j_lo = std::clamp(r.k_lo - first_position, std::int64_t{0}, key_len);
    const std::int64_t j_hi = std::clamp(r.k_hi - first_position, std::int64_t{0}, key_len);
    for (std::int64_t i = i_lo; i < i_hi; ++i) {
      for (std::int64_t j = j_lo; j < j_hi; ++j) cell(i, j) = 0.0f;
    }
  }
  if (window_ != 0) {
    for (std::int64_t i = 0; i < query_len; ++i) {
      const std::int64_t end = std::clamp(first_query + i - window_ + 1, std::int64_t{0}, key_len);
      for (std::int64_t j = 0; j < end; ++j) cell(i, j) = kMasked;
    }
  }
  const std::int64_t heads = dims[1];
  Tensor out = Tensor::Zeros(DType::kF32, {1, heads, query_len, key_len});
  auto* dst = static_cast<float*>(out.MutableData());
  const auto* src = HasArray() ? static_cast<const float*>(array_.Data()) : nullptr;
  const std::array<std::int64_t, 4> out_dims{1, heads, query_len, key_len};
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < query_len; ++i) {
      for (std::int64_t j = 0; j < key_len; ++j) {
        float value = cell(i, j);
        if (src != nullptr) value += src[Index(dims, h, i, j)];
        dst[Index(out_dims, h, i, j)] = value;
      }
    }
  }
  return out;
}

}  // namespace ringkv
