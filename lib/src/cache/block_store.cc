#include "block_store.h"

#include <atomic>
#include <gsl/assert>
#include <gsl/narrow>

#include "ringkv/kernels/kernel_table.h"
#include "ringkv/tensor_ops.h"
#include "stored_rows.h"
#include "strided_copy.h"

namespace ringkv::detail {

std::string DtypesName(DType keys, DType values) {
  std::string name(DTypeName(keys));
  if (values != keys) name.append("/").append(DTypeName(values));
  return name;
}

std::size_t KvLayout::BytesPerToken() const noexcept {
  return static_cast<std::size_t>(heads) *
         (StoredRowBytes(key_dtype, k_dim) + StoredRowBytes(value_dtype, v_dim));
}

BlockStore::BlockStore(std::int64_t block_tokens)
    : block_tokens_(block_tokens), epoch_(std::make_shared<ViewEpoch>()) {
  Expects(block_tokens > 0);
}

BlockStore::BlockStore(const BlockStore& other)
    : block_tokens_(other.block_tokens_),
      layout_(other.layout_),
      has_layout_(other.has_layout_),
      blocks_(other.blocks_),
      head_(other.head_),
      length_(other.length_),
      epoch_(std::make_shared<ViewEpoch>()) {}

BlockStore& BlockStore::operator=(const BlockStore& other) {
  if (this == &other) return *this;
  blocks_ = other.blocks_;  // the only step that allocates: nothing changed if it throws
  InvalidateViews();
  block_tokens_ = other.block_tokens_;
  layout_ = other.layout_;
  has_layout_ = other.has_layout_;
  head_ = other.head_;
  length_ = other.length_;
  return *this;
}

BlockStore::BlockStore(BlockStore&& other) noexcept
    : block_tokens_(other.block_tokens_),
      layout_(other.layout_),
      has_layout_(other.has_layout_),
      blocks_(std::move(other.blocks_)),
      head_(other.head_),
      length_(other.length_) {
  // Views of `other` name `other`, not this store: they must go stale. The epoch
  // object is reused (this store has no views yet).
  other.InvalidateViews();
  epoch_ = std::move(other.epoch_);
  other.blocks_.clear();
  other.head_ = 0;
  other.length_ = 0;
}

BlockStore& BlockStore::operator=(BlockStore&& other) noexcept {
  if (this == &other) return *this;
  InvalidateViews();
  other.InvalidateViews();
  block_tokens_ = other.block_tokens_;
  layout_ = other.layout_;
  has_layout_ = other.has_layout_;
  blocks_ = std::move(other.blocks_);
  head_ = other.head_;
  length_ = other.length_;
  other.blocks_.clear();
  other.head_ = 0;
  other.length_ = 0;
  return *this;
}

BlockStore::~BlockStore() { InvalidateViews(); }

void BlockStore::SetLayout(const KvLayout& layout) noexcept {
  Expects(length_ == 0 || layout == layout_);
  InvalidateViews();
  layout_ = layout;
  has_layout_ = true;
}

std::size_t BlockStore::AllocatedBytes() const noexcept {
  return blocks_.size() * static_cast<std::size_t>(block_tokens_) * layout_.BytesPerToken();
}

std::shared_ptr<BlockStore::Block> BlockStore::NewBlock() const {
  Expects(has_layout_);
  const KvLayout& l = layout_;
  return std::make_shared<Block>(Block{
      Tensor::Uninitialized(CarrierDtype(l.key_dtype),
                            {1, l.heads, block_tokens_, CarrierColumns(l.key_dtype, l.k_dim)}),
      Tensor::Uninitialized(CarrierDtype(l.value_dtype),
                            {1, l.heads, block_tokens_, CarrierColumns(l.value_dtype, l.v_dim)})});
}

BlockStore::Block& BlockStore::Writable(std::size_t block) {
  Expects(block < blocks_.size());
  std::shared_ptr<Block>& slot = blocks_[block];
  if (slot.use_count() > 1) {
    // Another store (a snapshot, a fork) still reads this block: give this store
    // its own copy before writing.
    slot = std::make_shared<Block>(Block{slot->keys.Clone(), slot->values.Clone()});
    return *slot;
  }
  // This store is the last owner, but the others may have read the block and let
  // go of it on other threads: use_count() is a relaxed load, so acquire their
  // release (the count's decrement) before writing over what they read.
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model fences; copying the pointer is an acq_rel
  // read-modify-write of the same count (libstdc++), which it does see.
  { const std::shared_ptr<Block> acquire = slot; }
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  return *slot;
}

void BlockStore::Resize(std::int64_t length) {
  Expects(length >= 0);
  InvalidateViews();
  if (length == 0) {
    Clear();
    return;
  }
  const std::int64_t old_length = length_;
  const auto needed =
      gsl::narrow<std::size_t>((head_ + length + block_tokens_ - 1) / block_tokens_);
  if (length < old_length) {
    blocks_.resize(needed);
    length_ = length;
    return;
  }
  // Grown slots have unspecified contents (fresh blocks are not zeroed, rows
  // past a shrink keep stale data): every caller writes a slot before any view
  // covers it, as the reference's live ranges never include its grow padding.
  if (old_length == 0) head_ = 0;
  while (blocks_.size() < needed) blocks_.push_back(NewBlock());
  length_ = length;
}

void BlockStore::DropFront(std::int64_t n) {
  Expects(n >= 0 && n <= length_);
  InvalidateViews();
  if (n == length_) {
    Clear();
    return;
  }
  head_ += n;
  length_ -= n;
  const std::int64_t drop = head_ / block_tokens_;
  blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(drop));
  head_ %= block_tokens_;
}

void BlockStore::Clear() noexcept {
  InvalidateViews();
  blocks_.clear();
  head_ = 0;
  length_ = 0;
}

void BlockStore::Reset() noexcept {
  Clear();
  has_layout_ = false;
  layout_ = KvLayout{};
}

void BlockStore::Write(std::int64_t slot, const Tensor& keys, const Tensor& values) {
  const std::int64_t count = keys.Dim(2);
  Expects(slot >= 0 && slot + count <= length_);
  InvalidateViews();
  const kernels::KernelTable& table = kernels::BestKernels();
  std::int64_t consumed = 0;
  ForEachRun(slot, slot + count, [&](std::size_t block, std::int64_t row, std::int64_t rows) {
    Block& target = Writable(block);
    // One pass per block run: the copy converts to (or quantizes into) the block
    // dtype as it goes, whatever the input's dtype and strides (no temporary
    // unless the input overlaps the block, i.e. is a view of this cache).
    Tensor key_rows = target.keys.Slice(2, row, row + rows);
    Tensor value_rows = target.values.Slice(2, row, row + rows);
    StoreRows(keys.Slice(2, consumed, consumed + rows), layout_.key_dtype, layout_.k_dim, key_rows,
              table);
    StoreRows(values.Slice(2, consumed, consumed + rows), layout_.value_dtype, layout_.v_dim,
              value_rows, table);
    consumed += rows;
  });
}

void BlockStore::WriteStored(std::int64_t slot, const Segment& seg) {
  const std::int64_t count = seg.keys.Dim(2);
  Expects(slot >= 0 && slot + count <= length_);
  InvalidateViews();
  std::int64_t consumed = 0;
  ForEachRun(slot, slot + count, [&](std::size_t block, std::int64_t row, std::int64_t rows) {
    Block& target = Writable(block);
    Tensor key_rows = target.keys.Slice(2, row, row + rows);
    Tensor value_rows = target.values.Slice(2, row, row + rows);
    CopyElementsSafely(seg.keys.Slice(2, consumed, consumed + rows), key_rows);
    CopyElementsSafely(seg.values.Slice(2, consumed, consumed + rows), value_rows);
    consumed += rows;
  });
}

void BlockStore::Append(const Tensor& keys, const Tensor& values) {
  const std::int64_t count = keys.Dim(2);
  const std::int64_t start = length_;
  InvalidateViews();
  if (length_ == 0) {
    blocks_.clear();
    head_ = 0;
  }
  // Grow without zeroing: every new row is written right away.
  const auto needed =
      gsl::narrow<std::size_t>((head_ + start + count + block_tokens_ - 1) / block_tokens_);
  while (blocks_.size() < needed) blocks_.push_back(NewBlock());
  length_ = start + count;
  Write(start, keys, values);
}

void BlockStore::AppendCopyOf(const BlockStore& src, std::int64_t begin, std::int64_t end) {
  Expects(begin >= 0 && begin <= end && end <= src.length_);
  InvalidateViews();
  Expects(src.has_layout_ && (!has_layout_ || src.layout_ == layout_));
  if (!has_layout_) SetLayout(src.layout_);
  // Stored rows move as bits: quantized rows keep their scales, nothing is requantized.
  src.ForEachSegment(begin, end, [&](const Segment& seg) {
    const std::int64_t start = length_;
    Resize(start + seg.keys.Dim(2));
    WriteStored(start, seg);
  });
}

void BlockStore::AppendFrom(const BlockStore& src, std::int64_t begin, std::int64_t end) {
  Expects(begin >= 0 && begin <= end && end <= src.length_);
  InvalidateViews();
  if (begin == end) return;
  Expects(src.has_layout_ && (!has_layout_ || src.layout_ == layout_));
  if (!has_layout_) SetLayout(src.layout_);
  const std::int64_t src_phase = (src.head_ + begin) % src.block_tokens_;
  if (length_ == 0) {
    blocks_.clear();
    head_ = 0;
    if (src.block_tokens_ == block_tokens_ && src_phase != 0) {
      // An empty store adopts the source's phase (and its first block), so every
      // block is shared.
      blocks_.push_back(src.blocks_[static_cast<std::size_t>((src.head_ + begin) / block_tokens_)]);
      head_ = src_phase;
    }
  }
  const std::int64_t phase = (head_ + length_) % block_tokens_;
  if (src.block_tokens_ != block_tokens_ || phase != src_phase) {
    AppendCopyOf(src, begin, end);
    return;
  }
  std::int64_t slot = begin;
  auto src_block = static_cast<std::size_t>((src.head_ + begin) / src.block_tokens_);
  if (phase != 0) {
    // Fill the rest of this store's partly used last block.
    const std::int64_t rows = std::min(block_tokens_ - phase, end - begin);
    const std::size_t last = blocks_.size() - 1;
    if (!SameBlock(last, src, src_block)) {
      const Segment seg = src.View(src_block, phase, rows);
      Block& target = Writable(last);
      SliceUpdate(target.keys, seg.keys, 2, phase);
      SliceUpdate(target.values, seg.values, 2, phase);
    }
    length_ += rows;
    slot += rows;
    ++src_block;
  }
  // Whole blocks from here on: share them.
  while (slot < end) {
    blocks_.push_back(src.blocks_[src_block]);
    const std::int64_t rows = std::min(block_tokens_, end - slot);
    length_ += rows;
    slot += rows;
    ++src_block;
  }
}

BlockStore BlockStore::Share(std::int64_t begin, std::int64_t end) const {
  Expects(begin >= 0 && begin <= end && end <= length_);
  BlockStore result(block_tokens_);
  result.layout_ = layout_;
  result.has_layout_ = has_layout_;
  if (begin == end) return result;
  const auto first = static_cast<std::size_t>((head_ + begin) / block_tokens_);
  const auto last = static_cast<std::size_t>((head_ + end - 1) / block_tokens_);
  result.blocks_.assign(blocks_.begin() + static_cast<std::ptrdiff_t>(first),
                        blocks_.begin() + static_cast<std::ptrdiff_t>(last + 1));
  result.head_ = (head_ + begin) % block_tokens_;
  result.length_ = end - begin;
  return result;
}

BlockStore::Segment BlockStore::View(std::size_t block, std::int64_t row,
                                     std::int64_t count) const {
  Expects(block < blocks_.size() && row >= 0 && row + count <= block_tokens_);
  const Block& b = *blocks_[block];
  return Segment{b.keys.Slice(2, row, row + count), b.values.Slice(2, row, row + count)};
}

const void* BlockStore::KeyData(std::size_t block) const noexcept {
  return blocks_[block]->keys.Data();
}

const void* BlockStore::ValueData(std::size_t block) const noexcept {
  return blocks_[block]->values.Data();
}

bool BlockStore::SameBlock(std::size_t block, const BlockStore& other,
                           std::size_t other_block) const noexcept {
  return block < blocks_.size() && other_block < other.blocks_.size() &&
         blocks_[block] == other.blocks_[other_block];
}

}  // namespace ringkv::detail
