#pragma once
// The library's side of KvView and KVHistory: building views and histories, and
// reading them as the kernels do. Private to lib/ (and its tests), so the public
// headers show only the user's API.

#include <cstdint>
#include <span>

#include "ringkv/attention_mask.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"
#include "ringkv/kv_history.h"

namespace ringkv::detail {

class BlockStore;

struct KvAccess {
  using MaskApplier = KVHistory::MaskApplier;

  // Adds slots [begin, end) of `store` to `view` (at most four runs per view).
  static void AddRange(KvView& view, const BlockStore* store, std::int64_t begin, std::int64_t end);

  static KVHistory MakeHistory(const KvView& kv, const MaskApplier& applier) {
    return KVHistory(kv, applier);
  }
  static const MaskApplier& Applier(const KVHistory& history) noexcept { return history.applier_; }

  // The number of block runs the view names: the KvSegments kernels::Sdpa gets.
  // Throws ringkv::Error on a stale view.
  static std::int64_t SegmentCount(const KvView& view);
  // Writes the view's runs as kernel arrays into out (SegmentCount(view) entries),
  // allocating nothing. Throws ringkv::Error on a stale view.
  static void KernelSegments(const KvView& view, std::span<kernels::KvSegment> out);

  // One side of the view as a contiguous f32 copy [1, Hkv, K, D or Dv], quantized
  // rows dequantised (ConcatKeys / ConcatValues of a quantized view).
  static Tensor ConcatDequantised(const KvView& view, bool keys);

  // The mask the kernel must see over the stored order, given the caller's
  // logical mask. The window of a rotating cache only hides keys older than the
  // window (WindowOnly, as the reference's window mask), never later ones: the
  // caller's mask decides about those. Rotating caches at L == 1: zero or plain
  // causal -> no mask (storage holds exactly the window and nothing later); any
  // other mask (an array, relaxed cells, a window of its own) is materialised in
  // logical order and its key columns gathered into ring-slot order with
  // table.ring_gather. At L > 1 (storage in logical order) and in the speculative
  // wrapper (kLogicalSliding): logical ∩ WindowOnly(window).
  static AttentionMask ApplyMask(const KVHistory& history, const AttentionMask& logical,
                                 const kernels::KernelTable& table);
};

using MaskApplier = KvAccess::MaskApplier;

inline void AddRange(KvView& view, const BlockStore* store, std::int64_t begin, std::int64_t end) {
  KvAccess::AddRange(view, store, begin, end);
}
inline KVHistory MakeHistory(const KvView& kv, const MaskApplier& applier) {
  return KvAccess::MakeHistory(kv, applier);
}

}  // namespace ringkv::detail
