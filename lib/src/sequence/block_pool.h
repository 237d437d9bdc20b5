#pragma once
// The storage behind a CausalCache: a fixed number of blocks, each holding
// block_tokens token rows of every layer's keys and values, reference counted
// by their owners (sequences, sequence snapshots, saved states).
//
// Block layout, in bytes from the block's start (T = block_tokens):
//   layer l keys    at l * LayerBytes()               [Hkv, T, key row]
//   layer l values  at l * LayerBytes() + KeyBytes()  [Hkv, T, value row]
// so a list of (block, row) runs built once per forward pass addresses every
// layer by adding l * LayerBytes() (BatchHistory's byte offsets). A row is D (or
// Dv) elements of a float dtype, or a quantized dtype's stored row with its
// scales, padded to 4 bytes (stored_rows.h: the block is then f32 "carrier"
// memory that is only ever copied as bits).
//
// Each block keeps a high-water row: rows at or above it were never handed to
// any owner, so the owner whose rows end there may append in place even while
// others share the block (they never read those rows). Everything else is
// copy-on-write, decided by the cache.
//
// Reference counts and the free list sit behind a mutex: a snapshot or saved
// state may be destroyed on another thread than the one using the cache.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

using BlockId = std::int32_t;
inline constexpr BlockId kNoBlock = -1;

struct PoolLayout {
  // Both the same float dtype, or both quantized (possibly different).
  DType key_dtype = DType::kF16;
  DType value_dtype = DType::kF16;
  int layers = 1;
  std::int64_t heads = 0;      // Hkv
  std::int64_t key_dim = 0;    // D
  std::int64_t value_dim = 0;  // Dv
  std::int64_t block_tokens = 0;
  friend bool operator==(const PoolLayout&, const PoolLayout&) = default;

  std::size_t KeyBytes() const noexcept;    // one layer's keys [Hkv, T, D]
  std::size_t ValueBytes() const noexcept;  // one layer's values [Hkv, T, Dv]
  std::size_t LayerBytes() const noexcept { return KeyBytes() + ValueBytes(); }
  std::size_t BlockBytes() const noexcept {
    return LayerBytes() * static_cast<std::size_t>(layers);
  }
  std::size_t TokenBytes() const noexcept;  // one token, every layer, K and V

  // The element dtype of the block's memory and of Keys() / Values().
  DType Element() const noexcept;
  // Last-axis sizes of Keys() / Values(): D and Dv, or the carrier columns of a stored row.
  std::int64_t KeyColumns() const noexcept;
  std::int64_t ValueColumns() const noexcept;
  // Distance between consecutive rows in the kernels' units (sdpa.h): elements
  // of a float dtype, bytes of a quantized one.
  std::int64_t KeyRowStride() const noexcept;
  std::int64_t ValueRowStride() const noexcept;
};

class BlockPool {
 public:
  BlockPool(const PoolLayout& layout, std::int64_t capacity_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const PoolLayout& Layout() const noexcept { return layout_; }
  std::int64_t Capacity() const noexcept { return static_cast<std::int64_t>(refs_.size()); }
  std::int64_t Used() const;  // blocks with at least one reference
  // Blocks neither referenced nor taken by Take() (whether or not their memory exists yet).
  std::int64_t Free() const;

  // Takes a free block (reference count 0, high water 0) for the caller to
  // Retain, or to Give back unused. Allocates the block's memory on first use:
  // throws ringkv::Error when that fails, the pool unchanged. Expects Free() > 0.
  BlockId Take();
  void Give(BlockId block) noexcept;
  // Allocates the memory of every block (a reserve pass), so no later Take allocates.
  void AllocateAll();

  void Retain(BlockId block) noexcept;
  void Release(BlockId block) noexcept;  // the last release frees the block
  std::int32_t Refs(BlockId block) const;

  std::int32_t HighWater(BlockId block) const noexcept {
    return high_water_[static_cast<std::size_t>(block)];
  }
  void RaiseHighWater(BlockId block, std::int32_t row) noexcept;

  std::byte* Data(BlockId block) noexcept;
  const std::byte* Data(BlockId block) const noexcept;
  // Views of one layer's rows [row, row + count): keys [1, Hkv, count, KeyColumns()], values
  // [1, Hkv, count, ValueColumns()], of dtype Element().
  Tensor Keys(BlockId block, int layer, std::int64_t row, std::int64_t count) const;
  Tensor Values(BlockId block, int layer, std::int64_t row, std::int64_t count) const;

  // dst's bytes = src's (every layer); dst's high water = src's.
  void CopyBlock(BlockId src, BlockId dst) noexcept;
  // Rows [src_row, src_row + count) of src_pool's block src into rows from
  // dst_row of block dst of this pool, every layer (same layout).
  void CopyRows(const BlockPool& src_pool, BlockId src, std::int64_t src_row, BlockId dst,
                std::int64_t dst_row, std::int64_t count) noexcept;

 private:
  void AllocateLocked(BlockId block);

  PoolLayout layout_;
  std::vector<Tensor>
      memory_;  // per block: Element() [BlockBytes() / e] flat, empty until first used
  std::vector<std::int32_t> refs_;        // per block
  std::vector<std::int32_t> high_water_;  // per block, in [0, T]
  std::vector<BlockId> free_;             // capacity reserved up front: releasing never allocates
  std::int64_t used_ = 0;
  mutable std::mutex mutex_;
};

}  // namespace ringkv::detail
