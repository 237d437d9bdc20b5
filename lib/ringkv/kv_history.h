#pragma once
// What attention reads from a cache: the stored keys and values as runs of
// consecutive slots inside the cache's storage blocks (no copy), and the rule
// that turns the caller's logical mask into one that fits the storage order.
//
// A KvView / KVHistory refers to the cache's storage without owning it: like an
// iterator it is valid until the next mutating call on that cache (Update,
// Restore, Free, Swap, a speculation's Commit or rollback, ...) or until the
// cache is destroyed. Every accessor checks this (one compare per storage run
// it names, not per key) and throws ringkv::Error on a stale view. Calls that
// do not mutate (Snapshot, State, View, Fork, Merge, Split, a failed call, ...)
// keep views valid; moving a cache keeps them valid too (they follow its
// storage). The Tensors that KeySegments() / ValueSegments() return are views
// of the storage blocks that keep those blocks alive: a later in-place write
// into a block they share shows through them, so copy (ConcatKeys, Clone) to
// keep the values.

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "ringkv/attention_mask.h"
#include "ringkv/tensor.h"

namespace ringkv {

namespace detail {
class BlockStore;
struct ViewEpoch;
struct KvAccess;  // the library's access to views and histories (lib/src/cache/kv_access.h)
}  // namespace detail

// Every accessor throws ringkv::Error when the view is stale (see above).
class KvView {
 public:
  KvView() = default;

  std::int64_t Length() const;  // keys in view (K)
  bool Empty() const { return Length() == 0; }
  // The stored dtypes (f32 when empty). Float K and V share one; quantized ones
  // (int8 / int4, kv_storage.h) may differ. Dtype() is KeyDtype().
  DType Dtype() const;
  DType KeyDtype() const;
  DType ValueDtype() const;
  std::int64_t Heads() const;     // Hkv
  std::int64_t KeyDim() const;    // D
  std::int64_t ValueDim() const;  // Dv

  // One [1, Hkv, n, D] / [1, Hkv, n, Dv] view per storage block run, in view
  // order. Tensors cannot hold quantized rows: for an int8 / int4 side these
  // throw ringkv::Error (use ConcatKeys / ConcatValues, or Attention).
  std::vector<Tensor> KeySegments() const;
  std::vector<Tensor> ValueSegments() const;
  // Contiguous copies [1, Hkv, K, D] / [1, Hkv, K, Dv]: O(K), for tests and tools.
  // A quantized side comes back dequantised as f32 (x = scale * q).
  Tensor ConcatKeys() const;
  Tensor ConcatValues() const;

 private:
  friend struct detail::KvAccess;
  struct Range {
    const detail::BlockStore* store = nullptr;
    std::int64_t begin = 0;
    std::int64_t end = 0;
    std::shared_ptr<const detail::ViewEpoch> epoch;  // the store's, outlives it
    std::uint64_t generation = 0;                    // epoch's value when added
  };
  // Throws ringkv::Error naming `function` when a store changed since the view was taken.
  void CheckCurrent(const char* function) const;
  static constexpr std::size_t kMaxRanges = 4;
  std::array<Range, kMaxRanges> ranges_{};  // a ring read oldest-first needs 2, + a draft buffer
  std::size_t range_count_ = 0;
};

// The keys and values an Update returned, with the rule that turns the caller's
// logical mask into the mask over the stored order (docs/caches.md, "Masks"):
// pass it to Attention.
class KVHistory {
 public:
  KVHistory() = default;  // no keys

  const KvView& Kv() const noexcept { return kv_; }

 private:
  friend struct detail::KvAccess;
  // How the storage order relates to the logical (oldest-first) order.
  struct MaskApplier {
    enum class Kind : std::uint8_t {
      kIdentity,        // storage order is logical order; the mask passes through
      kRotating,        // the reference's rotatingApplier (kv_access.h, ApplyMask)
      kLogicalSliding,  // logical order, window applied: mask ∩ WindowOnly(window)
    };
    Kind kind = Kind::kIdentity;
    std::int64_t query_len = 0;  // L of the Update that produced the history
    std::int64_t key_len = 0;    // K
    std::int64_t window = 0;
    std::int64_t ring_idx = 0;        // write cursor after the Update (kRotating)
    std::int64_t first_position = 0;  // absolute position of logical key 0 (for relaxed cells)
  };
  KVHistory(const KvView& kv, const MaskApplier& applier) : kv_(kv), applier_(applier) {}

  KvView kv_;
  MaskApplier applier_;
};

}  // namespace ringkv
