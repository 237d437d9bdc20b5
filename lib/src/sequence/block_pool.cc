#include "block_pool.h"

#include <algorithm>
#include <cstring>
#include <gsl/assert>

#include "cache/stored_rows.h"

namespace ringkv::detail {

std::size_t PoolLayout::KeyBytes() const noexcept {
  return static_cast<std::size_t>(heads * block_tokens) * StoredRowBytes(key_dtype, key_dim);
}

std::size_t PoolLayout::ValueBytes() const noexcept {
  return static_cast<std::size_t>(heads * block_tokens) * StoredRowBytes(value_dtype, value_dim);
}

std::size_t PoolLayout::TokenBytes() const noexcept {
  return static_cast<std::size_t>(heads * layers) *
         (StoredRowBytes(key_dtype, key_dim) + StoredRowBytes(value_dtype, value_dim));
}

DType PoolLayout::Element() const noexcept { return CarrierDtype(key_dtype); }

std::int64_t PoolLayout::KeyColumns() const noexcept { return CarrierColumns(key_dtype, key_dim); }

std::int64_t PoolLayout::ValueColumns() const noexcept {
  return CarrierColumns(value_dtype, value_dim);
}

std::int64_t PoolLayout::KeyRowStride() const noexcept {
  return static_cast<std::int64_t>(StoredRowBytes(key_dtype, key_dim) / SizeOf(key_dtype));
}

std::int64_t PoolLayout::ValueRowStride() const noexcept {
  return static_cast<std::int64_t>(StoredRowBytes(value_dtype, value_dim) / SizeOf(value_dtype));
}

BlockPool::BlockPool(const PoolLayout& layout, std::int64_t capacity_blocks)
    : layout_(layout),
      memory_(static_cast<std::size_t>(capacity_blocks)),
      refs_(static_cast<std::size_t>(capacity_blocks), 0),
      high_water_(static_cast<std::size_t>(capacity_blocks), 0) {
  Expects(capacity_blocks > 0 && layout.block_tokens > 0 && layout.layers > 0);
  free_.reserve(static_cast<std::size_t>(capacity_blocks));
  // Popped from the back: block 0 first, then 1, ...
  for (auto b = static_cast<BlockId>(capacity_blocks); b > 0; --b) free_.push_back(b - 1);
}

std::int64_t BlockPool::Used() const {
  const std::lock_guard lock(mutex_);
  return used_;
}

std::int64_t BlockPool::Free() const {
  const std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(free_.size());
}

void BlockPool::AllocateLocked(BlockId block) {
  Tensor& memory = memory_[static_cast<std::size_t>(block)];
  if (!memory.Empty()) return;
  // Every row is written before any owner reads it: no need to zero.
  const auto elements = static_cast<std::int64_t>(layout_.BlockBytes() / SizeOf(layout_.Element()));
  memory = Tensor::Uninitialized(layout_.Element(), {elements});
}

BlockId BlockPool::Take() {
  const std::lock_guard lock(mutex_);
  Expects(!free_.empty());
  const BlockId block = free_.back();
  AllocateLocked(block);  // may throw: the block stays free
  free_.pop_back();
  high_water_[static_cast<std::size_t>(block)] = 0;
  return block;
}

void BlockPool::Give(BlockId block) noexcept {
  const std::lock_guard lock(mutex_);
  Expects(refs_[static_cast<std::size_t>(block)] == 0);
  free_.push_back(block);
}

void BlockPool::AllocateAll() {
  const std::lock_guard lock(mutex_);
  for (const BlockId block : free_) AllocateLocked(block);
}

void BlockPool::Retain(BlockId block) noexcept {
  const std::lock_guard lock(mutex_);
  std::int32_t& refs = refs_[static_cast<std::size_t>(block)];
  if (refs++ == 0) ++used_;
}

void BlockPool::Release(BlockId block) noexcept {
  const std::lock_guard lock(mutex_);
  std::int32_t& refs = refs_[static_cast<std::size_t>(block)];
  Expects(refs > 0);
  if (--refs == 0) {
    --used_;
    free_.push_back(block);  // within the reserved capacity
  }
}

std::int32_t BlockPool::Refs(BlockId block) const {
  const std::lock_guard lock(mutex_);
  return refs_[static_cast<std::size_t>(block)];
}

void BlockPool::RaiseHighWater(BlockId block, std::int32_t row) noexcept {
  std::int32_t& high = high_water_[static_cast<std::size_t>(block)];
  high = std::max(high, row);
}

std::byte* BlockPool::Data(BlockId block) noexcept {
  return static_cast<std::byte*>(memory_[static_cast<std::size_t>(block)].MutableData());
}

const std::byte* BlockPool::Data(BlockId block) const noexcept {
  return static_cast<const std::byte*>(memory_[static_cast<std::size_t>(block)].Data());
}

Tensor BlockPool::Keys(BlockId block, int layer, std::int64_t row, std::int64_t count) const {
  const Tensor& memory = memory_[static_cast<std::size_t>(block)];
  const auto e = static_cast<std::int64_t>(SizeOf(layout_.Element()));
  const std::int64_t begin = layer * static_cast<std::int64_t>(layout_.LayerBytes()) / e;
  const std::int64_t size = static_cast<std::int64_t>(layout_.KeyBytes()) / e;
  return memory.Slice(0, begin, begin + size)
      .Reshape({1, layout_.heads, layout_.block_tokens, layout_.KeyColumns()})
      .Slice(2, row, row + count);
}

Tensor BlockPool::Values(BlockId block, int layer, std::int64_t row, std::int64_t count) const {
  const Tensor& memory = memory_[static_cast<std::size_t>(block)];
  const auto e = static_cast<std::int64_t>(SizeOf(layout_.Element()));
  const std::int64_t begin = (layer * static_cast<std::int64_t>(layout_.LayerBytes()) +
                              static_cast<std::int64_t>(layout_.KeyBytes())) /
                             e;
  const std::int64_t size = static_cast<std::int64_t>(layout_.ValueBytes()) / e;
  return memory.Slice(0, begin, begin + size)
      .Reshape({1, layout_.heads, layout_.block_tokens, layout_.ValueColumns()})
      .Slice(2, row, row + count);
}

void BlockPool::CopyBlock(BlockId src, BlockId dst) noexcept {
  std::memcpy(Data(dst), Data(src), layout_.BlockBytes());
  high_water_[static_cast<std::size_t>(dst)] = high_water_[static_cast<std::size_t>(src)];
}

void BlockPool::CopyRows(const BlockPool& src_pool, BlockId src, std::int64_t src_row, BlockId dst,
                         std::int64_t dst_row, std::int64_t count) noexcept {
  Expects(src_pool.layout_ == layout_);
  const auto rows = static_cast<std::size_t>(layout_.block_tokens);
  const std::size_t k_row = StoredRowBytes(layout_.key_dtype, layout_.key_dim);
  const std::size_t v_row = StoredRowBytes(layout_.value_dtype, layout_.value_dim);
  const std::byte* from = src_pool.Data(src);
  std::byte* to = Data(dst);
  for (int layer = 0; layer < layout_.layers; ++layer) {
    const std::size_t base = static_cast<std::size_t>(layer) * layout_.LayerBytes();
    for (std::int64_t h = 0; h < layout_.heads; ++h) {
      const auto head = static_cast<std::size_t>(h);
      const std::size_t k = base + head * rows * k_row;
      const std::size_t v = base + layout_.KeyBytes() + head * rows * v_row;
      std::memcpy(to + k + static_cast<std::size_t>(dst_row) * k_row,
                  from + k + static_cast<std::size_t>(src_row) * k_row,
                  static_cast<std::size_t>(count) * k_row);
      std::memcpy(to + v + static_cast<std::size_t>(dst_row) * v_row,
                  from + v + static_cast<std::size_t>(src_row) * v_row,
                  static_cast<std::size_t>(count) * v_row);
    }
  }
  RaiseHighWater(dst, static_cast<std::int32_t>(dst_row + count));
}

}  // namespace ringkv::detail
