#pragma once
// The logical attention mask of a forward pass: a structural part (none, causal,
// sliding window) and an optional additive array. Keys are in logical order:
// with L queries over K keys, query i sits at position K - L + i.
//   causal:             query at position p sees keys at positions <= p
//   sliding window (w): query at position p sees keys in (p - w, p]
//   array:              [1, 1 or H, L or 1, K or 1] f32 added to the logits (-inf hides)

#include <cstdint>

#include "ringkv/tensor.h"

namespace ringkv {

class AttentionMask {
 public:
  enum class Kind : std::uint8_t { kNone, kCausal, kSlidingWindow };

  AttentionMask() = default;  // the zero mask: every key visible
  static AttentionMask Zero() { return AttentionMask(); }
  static AttentionMask Causal();
  // window >= 1, else ringkv::Error.
  static AttentionMask SlidingWindow(std::int64_t window);
  // bias [1, 1 or H, L or 1, K or 1], any float dtype (converted to f32).
  static AttentionMask Additive(const Tensor& bias);
  // visible [1, 1 or H, L or 1, K or 1]: nonzero = visible. Stored as an additive 0 / -inf array.
  static AttentionMask Boolean(const Tensor& visible);

  // Keys visible under both masks: the stricter structure and the sum of the arrays.
  AttentionMask Intersect(const AttentionMask& other) const;

  bool IsZero() const noexcept { return kind_ == Kind::kNone && !HasArray(); }
  // Plain causal, with no array.
  bool IsCausal() const noexcept { return kind_ == Kind::kCausal && !HasArray(); }
  bool HasArray() const noexcept { return !array_.Empty(); }
  Kind StructuralKind() const noexcept { return kind_; }
  std::int64_t Window() const noexcept { return window_; }  // 0 unless kSlidingWindow
  const Tensor& Array() const noexcept { return array_; }   // empty unless HasArray()

  // Materialises the whole mask as an additive f32 array [1, 1 or H, L, K] for
  // query_len queries over key_len keys; throws ringkv::Error when the array's
  // dims do not fit. A zero mask gives zeros.
  Tensor AsArray(std::int64_t query_len, std::int64_t key_len) const;

 private:
  Kind kind_ = Kind::kNone;
  std::int64_t window_ = 0;
  Tensor array_;  // [1, 1 or H, L or 1, K or 1] f32, contiguous; empty when absent
};

}  // namespace ringkv
