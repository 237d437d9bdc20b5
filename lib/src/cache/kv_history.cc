#include "ringkv/kv_history.h"

#include <fmt/format.h>

#include <gsl/assert>
#include <gsl/narrow>

#include "block_store.h"
#include "kernel_args.h"
#include "kv_access.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/tensor_ops.h"
#include "stored_rows.h"

namespace ringkv {

namespace detail {

void KvAccess::AddRange(KvView& view, const BlockStore* store, std::int64_t begin,
                        std::int64_t end) {
  Expects(store != nullptr && store->Epoch() != nullptr);
  Expects(begin >= 0 && begin <= end && end <= store->Length());
  Expects(view.range_count_ < KvView::kMaxRanges);
  Expects(view.range_count_ == 0 || view.ranges_[0].store->Layout() == store->Layout());
  if (begin == end) return;
  view.ranges_[view.range_count_++] =
      KvView::Range{store, begin, end, store->Epoch(), store->Epoch()->generation};
}

}  // namespace detail

void KvView::CheckCurrent(const char* function) const {
  for (std::size_t i = 0; i < range_count_; ++i) {
    const Range& r = ranges_[i];
    if (r.epoch->generation != r.generation) {
      throw Error(fmt::format(
          "[KvView::{}] the view is stale: its cache was changed (Update, Restore, Free, Swap, "
          "a speculation's Commit or rollback, ...) or destroyed after the view was taken "
          "(storage run {} at generation {}, now {})",
          function, i, r.generation, r.epoch->generation));
    }
  }
}

std::int64_t KvView::Length() const {
  CheckCurrent("Length");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < range_count_; ++i) total += ranges_[i].end - ranges_[i].begin;
  return total;
}

DType KvView::Dtype() const {
  CheckCurrent("Dtype");
  return range_count_ == 0 ? DType::kF32 : ranges_[0].store->Layout().key_dtype;
}
DType KvView::KeyDtype() const {
  CheckCurrent("KeyDtype");
  return range_count_ == 0 ? DType::kF32 : ranges_[0].store->Layout().key_dtype;
}
DType KvView::ValueDtype() const {
  CheckCurrent("ValueDtype");
  return range_count_ == 0 ? DType::kF32 : ranges_[0].store->Layout().value_dtype;
}
std::int64_t KvView::Heads() const {
  CheckCurrent("Heads");
  return range_count_ == 0 ? 0 : ranges_[0].store->Layout().heads;
}
std::int64_t KvView::KeyDim() const {
  CheckCurrent("KeyDim");
  return range_count_ == 0 ? 0 : ranges_[0].store->Layout().k_dim;
}
std::int64_t KvView::ValueDim() const {
  CheckCurrent("ValueDim");
  return range_count_ == 0 ? 0 : ranges_[0].store->Layout().v_dim;
}

namespace {

void RefuseQuantized(const char* function, const char* side, DType dtype) {
  if (!IsQuantized(dtype)) return;
  throw Error(fmt::format(
      "[KvView::{}] the {} are stored as {}, which a Tensor cannot hold: use ConcatKeys / "
      "ConcatValues (dequantised f32 copies) or Attention",
      function, side, dtype));
}

}  // namespace

namespace detail {

Tensor KvAccess::ConcatDequantised(const KvView& view, bool keys) {
  std::vector<Tensor> loaded;
  for (std::size_t i = 0; i < view.range_count_; ++i) {
    const KvView::Range& r = view.ranges_[i];
    const KvLayout& layout = r.store->Layout();
    r.store->ForEachSegment(r.begin, r.end, [&](const BlockStore::Segment& s) {
      loaded.push_back(
          keys ? LoadRows(s.keys, layout.key_dtype, layout.k_dim, kernels::BestKernels())
               : LoadRows(s.values, layout.value_dtype, layout.v_dim, kernels::BestKernels()));
    });
  }
  return Concatenate(loaded, 2);
}

}  // namespace detail

std::vector<Tensor> KvView::KeySegments() const {
  CheckCurrent("KeySegments");
  RefuseQuantized("KeySegments", "keys", KeyDtype());
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < range_count_; ++i) {
    ranges_[i].store->ForEachSegment(
        ranges_[i].begin, ranges_[i].end,
        [&](const detail::BlockStore::Segment& s) { out.push_back(s.keys); });
  }
  return out;
}

std::vector<Tensor> KvView::ValueSegments() const {
  CheckCurrent("ValueSegments");
  RefuseQuantized("ValueSegments", "values", ValueDtype());
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < range_count_; ++i) {
    ranges_[i].store->ForEachSegment(
        ranges_[i].begin, ranges_[i].end,
        [&](const detail::BlockStore::Segment& s) { out.push_back(s.values); });
  }
  return out;
}

Tensor KvView::ConcatKeys() const {
  CheckCurrent("ConcatKeys");
  if (range_count_ == 0) return Tensor();
  if (IsQuantized(KeyDtype())) return detail::KvAccess::ConcatDequantised(*this, true);
  const std::vector<Tensor> parts = KeySegments();
  return Concatenate(parts, 2);
}

Tensor KvView::ConcatValues() const {
  CheckCurrent("ConcatValues");
  if (range_count_ == 0) return Tensor();
  if (IsQuantized(ValueDtype())) return detail::KvAccess::ConcatDequantised(*this, false);
  const std::vector<Tensor> parts = ValueSegments();
  return Concatenate(parts, 2);
}

namespace detail {

std::int64_t KvAccess::SegmentCount(const KvView& view) {
  view.CheckCurrent("KernelSegments");
  std::int64_t count = 0;
  for (std::size_t i = 0; i < view.range_count_; ++i) {
    const KvView::Range& r = view.ranges_[i];
    r.store->ForEachRun(r.begin, r.end, [&](std::size_t, std::int64_t, std::int64_t) { ++count; });
  }
  return count;
}

void KvAccess::KernelSegments(const KvView& view, std::span<kernels::KvSegment> out) {
  view.CheckCurrent("KernelSegments");
  std::size_t next = 0;
  for (std::size_t i = 0; i < view.range_count_; ++i) {
    const KvView::Range& r = view.ranges_[i];
    const KvLayout& layout = r.store->Layout();
    r.store->ForEachSegment(r.begin, r.end, [&](const BlockStore::Segment& s) {
      Expects(next < out.size());
      // Quantized sides go in place as stored rows (byte strides, sdpa.h).
      out[next++] = {StoredArrayRef(s.keys, layout.key_dtype, layout.k_dim),
                     StoredArrayRef(s.values, layout.value_dtype, layout.v_dim)};
    });
  }
  Expects(next == out.size());
}

AttentionMask KvAccess::ApplyMask(const KVHistory& history, const AttentionMask& logical,
                                  const kernels::KernelTable& table) {
  const MaskApplier& applier = history.applier_;
  switch (applier.kind) {
    case MaskApplier::Kind::kIdentity:
      return logical;
    case MaskApplier::Kind::kLogicalSliding:
      return logical.Intersect(AttentionMask::WindowOnly(applier.window));
    case MaskApplier::Kind::kRotating:
      break;
  }
  if (applier.query_len > 1) {
    // Prefill: the concat path left storage in logical order.
    return logical.Intersect(AttentionMask::WindowOnly(applier.window));
  }
  // Decode: storage holds exactly the window and nothing after the query.
  if (logical.IsZero() || logical.IsCausal()) return AttentionMask::Zero();
  const std::int64_t k = applier.key_len;
  const Tensor array = logical.AsArray(1, k, applier.first_position);  // [1, h, 1, K], logical
  const std::int64_t ring = applier.ring_idx % k;
  if (ring == 0) return AttentionMask::Additive(array);
  Tensor gathered = Tensor::Zeros(DType::kF32, array.GetShape());
  const std::int64_t rows = array.Dim(1) * array.Dim(2);
  table.ring_gather(array.Data(), k, gathered.MutableData(), k, gsl::narrow<std::size_t>(rows),
                    gsl::narrow<std::size_t>(k), gsl::narrow<std::size_t>(ring), sizeof(float));
  return AttentionMask::Additive(gathered);
}

}  // namespace detail
}  // namespace ringkv
