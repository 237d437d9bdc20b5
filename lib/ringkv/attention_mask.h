#pragma once
// The logical attention mask of a forward pass (the reference's AttentionMask,
// for one sequence: ringkv is B == 1). Keys are in logical order: with L queries
// over K keys, key j sits at position first + j and query i at position
// first + K - L + i, where `first` is the absolute position of the oldest key
// (0 without a cache; a cache's history knows its own). A mask is the
// intersection of up to four parts:
//   causal:           query at position p sees keys at positions <= p
//   window (w):       query at position p sees keys at positions > p - w, later keys
//                     included (the reference's window mask: only too-old keys hide)
//   relaxed cells:    rectangles of (query, key) positions that causality does not
//                     hide (Relax): bidirectional spans such as image tokens
//   array:            [1, 1 or H, L or 1, K or 1] f32 added to the logits (-inf hides)
// Causal + window is the sliding window: keys in (p - w, p], itself and w - 1
// earlier tokens. Causal and the window are evaluated by the kernel from
// positions; relaxed cells and arrays are materialised at attention time.

#include <cstdint>
#include <span>
#include <vector>

#include "ringkv/tensor.h"

namespace ringkv {

class AttentionMask {
 public:
  enum class Kind : std::uint8_t {
    kNone,
    kCausal,
    kWindow,         // window only
    kSlidingWindow,  // causal + window
  };

  // Query positions [q_lo, q_hi) x key positions [k_lo, k_hi), absolute.
  struct Rectangle {
    std::int64_t q_lo = 0, q_hi = 0, k_lo = 0, k_hi = 0;
    friend bool operator==(const Rectangle&, const Rectangle&) = default;
  };

  AttentionMask() = default;  // the zero mask: every key visible
  static AttentionMask Zero() { return AttentionMask(); }
  static AttentionMask Causal();
  // Window only: hides keys at positions <= p - window. window >= 1, else ringkv::Error.
  static AttentionMask WindowOnly(std::int64_t window);
  // Causal ∩ WindowOnly(window). window >= 1, else ringkv::Error.
  static AttentionMask SlidingWindow(std::int64_t window);
  // bias [1, 1 or H, L or 1, K or 1], any float dtype (converted to f32).
  static AttentionMask Additive(const Tensor& bias);
  // visible [1, 1 or H, L or 1, K or 1]: nonzero = visible. Stored as an additive 0 / -inf array.
  static AttentionMask Boolean(const Tensor& visible);

  // This mask with the cells q in [q_lo, q_hi), k in [k_lo, k_hi) (absolute
  // positions) freed from causality; they stay subject to the window and the
  // array. Several calls make a union. A rectangle that frees nothing (empty,
  // or inside the causal triangle: k_hi - 1 <= q_lo) is dropped, so a plain
  // causal mask stays IsCausal() and on the kernel's fast path. The mask must
  // have a causal part: relaxing the zero mask, a window-only mask or a pure
  // array is a ringkv::Error, as is a negative position.
  AttentionMask Relax(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo,
                      std::int64_t k_hi) const;

  // Keys visible under both masks: causal if either is, the smaller window, the
  // relaxed cells that both leave visible, and the sum of the arrays.
  AttentionMask Intersect(const AttentionMask& other) const;

  bool IsZero() const noexcept {
    return !causal_ && window_ == 0 && relaxed_.empty() && !HasArray();
  }
  // Plain causal: no window, no relaxed cells, no array.
  bool IsCausal() const noexcept {
    return causal_ && window_ == 0 && relaxed_.empty() && !HasArray();
  }
  bool HasArray() const noexcept { return !array_.Empty(); }
  bool IsRelaxed() const noexcept { return !relaxed_.empty(); }
  Kind StructuralKind() const noexcept;
  std::int64_t Window() const noexcept { return window_; }  // 0 when there is no window
  std::span<const Rectangle> Relaxations() const noexcept { return relaxed_; }
  const Tensor& Array() const noexcept { return array_; }  // empty unless HasArray()

  // Materialises the whole mask as an additive f32 array [1, 1 or H, L, K] for
  // query_len queries over key_len keys whose oldest sits at absolute position
  // first_position: causality writes -inf, relaxed cells turn back to 0, the
  // window writes -inf, then the array is added. Throws ringkv::Error when the
  // array's dims do not fit. A zero mask gives zeros.
  Tensor AsArray(std::int64_t query_len, std::int64_t key_len,
                 std::int64_t first_position = 0) const;

 private:
  bool causal_ = false;
  std::int64_t window_ = 0;         // 0: no window
  std::vector<Rectangle> relaxed_;  // only with causal_
  Tensor array_;  // [1, 1 or H, L or 1, K or 1] f32, contiguous; empty when absent
};

}  // namespace ringkv
