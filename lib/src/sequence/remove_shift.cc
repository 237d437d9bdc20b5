// CausalCache::Remove's two cases: truncation, and removal in the middle with
// the shift function re-rotating the moved keys (cloning blocks others share).
#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>

#include "cache/stored_rows.h"
#include "causal_cache_impl.h"
#include "ringkv/error.h"
#include "strided_copy.h"

namespace ringkv {

void CausalCache::Impl::Truncate(SequenceSlot& slot, Position begin) {
  scratch.assign(slot.extents.begin(), slot.extents.end());
  detail::KeepBelow(scratch, begin);
  Assign(slot, slot.id, scratch);  // shrinking: no allocation
  EndPass();
}

void CausalCache::Impl::RemoveAndShift(const char* function, SequenceSlot& slot, Position begin,
                                       Position end) {
  detail::RemoveRange(slot.extents, begin, end, scratch);
  const std::int64_t moved = detail::CountAtOrAbove(scratch, begin);
  const Position delta_pos = begin - end;
  if (moved == 0) {
    slot.extents.reserve(scratch.size());
    Assign(slot, slot.id, scratch);
    EndPass();
    return;
  }
  if (!options.shift) {
    throw Error(fmt::format(
        "[{}] removing positions [{}, {}) of sequence {} moves {} tokens by {}, but the cache has "
        "no shift function (options.shift) to re-rotate their keys",
        function, begin, end, slot.id, moved, delta_pos));
  }
  // Blocks of moved tokens that another owner still reads are cloned, not rewritten.
  const auto moved_from = std::partition_point(scratch.begin(), scratch.end(),
                                               [begin](const Extent& e) { return e.pos < begin; });
  const std::span<const Extent> moved_extents(moved_from, scratch.end());
  std::vector<BlockId> shared;
  detail::DistinctBlocks(moved_extents, shared);
  std::erase_if(shared, [&](BlockId b) { return pool->Refs(b) == 1; });
  if (static_cast<std::int64_t>(shared.size()) > pool->Free()) {
    throw Error(fmt::format(
        "[{}] cache full: moving the tokens of shared blocks needs {} new blocks, {} of the "
        "capacity of {} blocks are free",
        function, shared.size(), pool->Free(), pool->Capacity()));
  }

  // The moved keys of every layer, for the shift function to re-rotate: in the
  // storage dtype, or dequantised to f32 (quantized keys are requantized after).
  const detail::PoolLayout& layout = Layout();
  const bool quantized = IsQuantized(layout.key_dtype);
  const DType shift_dtype = quantized ? DType::kF32 : layout.key_dtype;
  const kernels::KernelTable& kernels = kernels::BestKernels();
  std::vector<Position> new_positions;
  new_positions.reserve(static_cast<std::size_t>(moved));
  detail::AppendPositions(moved_extents, new_positions);
  std::vector<Tensor> keys(static_cast<std::size_t>(layout.layers));
  for (int layer = 0; layer < layout.layers; ++layer) {
    Tensor stored =
        Tensor::Uninitialized(layout.Element(), {1, layout.heads, moved, layout.KeyColumns()});
    std::int64_t at = 0;
    for (const Extent& e : moved_extents) {
      Tensor dst = stored.Slice(2, at, at + e.count);
      detail::CopyElements(pool->Keys(e.block, layer, e.row, e.count), dst);
      at += e.count;
    }
    keys[static_cast<std::size_t>(layer)] =
        quantized ? detail::LoadRows(stored, layout.key_dtype, layout.key_dim, kernels) : stored;
  }
  for (int layer = 0; layer < layout.layers; ++layer) {
    Tensor& k = keys[static_cast<std::size_t>(layer)];
    options.shift(ShiftRequest{layer, k, new_positions, delta_pos});
    if (k.Dtype() != shift_dtype ||
        !(k.GetShape() == Shape{1, layout.heads, moved, layout.key_dim})) {
      throw Error(fmt::format(
          "[{}] the shift function left layer {}'s keys as {} {}, expected {} [1, {}, {}, {}]",
          function, layer, DTypeName(k.Dtype()), ToString(k.GetShape()), DTypeName(shift_dtype),
          layout.heads, moved, layout.key_dim));
    }
    if (quantized) {
      // Requantized before the commit, which then only copies bits.
      Tensor stored =
          Tensor::Uninitialized(layout.Element(), {1, layout.heads, moved, layout.KeyColumns()});
      detail::StoreRows(k, layout.key_dtype, layout.key_dim, stored, kernels);
      k = std::move(stored);
    }
  }

  // Commit: clone shared blocks, move references, write the re-rotated keys.
  std::vector<BlockId> clones;
  clones.reserve(shared.size());
  try {
    for (std::size_t i = 0; i < shared.size(); ++i) clones.push_back(pool->Take());
    slot.extents.reserve(scratch.size());
  } catch (...) {
    for (const BlockId b : clones) pool->Give(b);
    throw;
  }
  for (std::size_t i = 0; i < shared.size(); ++i) {
    pool->CopyBlock(shared[i], clones[i]);
    for (Extent& e : scratch) {
      if (e.block == shared[i]) e.block = clones[i];
    }
    if (slot.tail == shared[i]) slot.tail = clones[i];
  }
  Assign(slot, slot.id, scratch);
  for (int layer = 0; layer < layout.layers; ++layer) {
    const Tensor& k = keys[static_cast<std::size_t>(layer)];
    std::int64_t at = 0;
    for (auto it = std::partition_point(slot.extents.begin(), slot.extents.end(),
                                        [begin](const Extent& e) { return e.pos < begin; });
         it != slot.extents.end(); ++it) {
      Tensor dst = pool->Keys(it->block, layer, it->row, it->count);
      detail::CopyElementsSafely(k.Slice(2, at, at + it->count), dst);
      at += it->count;
    }
  }
  EndPass();
}

}  // namespace ringkv
