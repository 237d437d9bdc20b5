#pragma once
// Paged K/V storage shared by every cache kind.
//
// Slots (token positions in storage order) map to fixed-size blocks. A block
// holds K [1, Hkv, block_tokens, D] and V [1, Hkv, block_tokens, Dv] (quantized
// sides as stored rows in a carrier tensor, stored_rows.h), so each kv head's
// rows are contiguous over block_tokens tokens (long per-head runs keep the
// hardware prefetcher useful in SDPA). Slot s lives in block (head_ + s) /
// block_tokens at row (head_ + s) % block_tokens; head_ lets the rotating cache
// drop its oldest slots without moving anything.
//
// Blocks are reference counted. Copying a BlockStore shares its blocks (O(blocks),
// no data copy); a write into a block that another store still holds clones that
// one block first (copy-on-write). Tensors handed out by View() share the
// block's Storage (they keep it alive) but not its place in the store.
//
// Views (KvView) name a store and a slot range; every mutation of the store
// bumps its ViewEpoch, so a view can tell that it is stale instead of reading
// blocks that were released or rewritten.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// What every stored token looks like; fixed from the first write until Free().
struct KvLayout {
  DType key_dtype = DType::kF32;  // float K and V share one dtype; quantized ones may differ
  DType value_dtype = DType::kF32;
  std::int64_t heads = 0;  // Hkv
  std::int64_t k_dim = 0;  // D
  std::int64_t v_dim = 0;  // Dv
  friend bool operator==(const KvLayout&, const KvLayout&) = default;
  bool Quantized() const noexcept { return IsQuantized(key_dtype) || IsQuantized(value_dtype); }
  // heads * (StoredRowBytes(K) + StoredRowBytes(V)): K and V together, scales included.
  std::size_t BytesPerToken() const noexcept;
};

// "f16" when keys and values share a dtype, else "int8/int4" (keys/values): for messages.
std::string DtypesName(DType keys, DType values);

// A store's view generation, shared with the views taken of it so that it
// outlives the store: a view of a destroyed store still reads a bumped value.
struct ViewEpoch {
  std::uint64_t generation = 0;
};

class BlockStore {
 public:
  static constexpr std::int64_t kDefaultBlockTokens = 256;

  explicit BlockStore(std::int64_t block_tokens = kDefaultBlockTokens);
  // Copies share the blocks but not the epoch: views of one never follow the other.
  BlockStore(const BlockStore& other);
  BlockStore& operator=(const BlockStore& other);
  // A moved-from store is empty, and views of it are stale.
  BlockStore(BlockStore&& other) noexcept;
  BlockStore& operator=(BlockStore&& other) noexcept;
  ~BlockStore();

  // A run of consecutive slots inside one block, as [1, Hkv, n, D] / [1, Hkv, n, Dv]
  // views; a quantized side is its stored rows (carrier, stored_rows.h).
  struct Segment {
    Tensor keys;
    Tensor values;
  };

  bool HasLayout() const noexcept { return has_layout_; }
  const KvLayout& Layout() const noexcept { return layout_; }
  void SetLayout(const KvLayout& layout) noexcept;
  std::int64_t Length() const noexcept { return length_; }
  std::int64_t BlockTokens() const noexcept { return block_tokens_; }
  std::size_t BlockCount() const noexcept { return blocks_.size(); }
  // Bytes of block memory this store references (shared blocks counted in full).
  std::size_t AllocatedBytes() const noexcept;

  // Grows with zero-filled slots or shrinks, releasing blocks past the new end.
  void Resize(std::int64_t length);
  // Drops the first n slots: slot n becomes slot 0. Releases blocks left empty.
  void DropFront(std::int64_t n);
  // Releases every block; the layout stays.
  void Clear() noexcept;
  // Releases every block and forgets the layout (Free()).
  void Reset() noexcept;

  // Copies keys [1, Hkv, L, D] and values (any float dtypes and strides: converted
  // to, or quantized into, the layout's dtypes in the same copy) into slots
  // [slot, slot + L) (which must exist), cloning any shared block it writes into.
  void Write(std::int64_t slot, const Tensor& keys, const Tensor& values);
  // Resize(Length() + L) then Write.
  void Append(const Tensor& keys, const Tensor& values);
  // Appends src's slots [begin, end). Whole blocks are shared when the block
  // phases line up; otherwise rows are copied (at most one partial block per end
  // when aligned).
  void AppendFrom(const BlockStore& src, std::int64_t begin, std::int64_t end);
  // Appends copies of src's slots [begin, end) (never shares).
  void AppendCopyOf(const BlockStore& src, std::int64_t begin, std::int64_t end);

  // A store over slots [begin, end) sharing this store's blocks.
  BlockStore Share(std::int64_t begin, std::int64_t end) const;

  // Calls fn(Segment) for each block run of slots [begin, end), in slot order.
  template <class Fn>
  void ForEachSegment(std::int64_t begin, std::int64_t end, Fn&& fn) const;
  // Same, but hands over (block index, first row, row count) without building views.
  template <class Fn>
  void ForEachRun(std::int64_t begin, std::int64_t end, Fn&& fn) const;

  Segment View(std::size_t block, std::int64_t row, std::int64_t count) const;
  // Raw element pointers of a block's K and V (row 0 of head 0).
  const void* KeyData(std::size_t block) const noexcept;
  const void* ValueData(std::size_t block) const noexcept;

  // Calls fn(id, bytes) for each block this store references; stores sharing a
  // block pass the same id, so a caller can count shared blocks once.
  template <class Fn>
  void ForEachBlock(Fn&& fn) const;

  // Whether two stores hold the same block object at these indices.
  bool SameBlock(std::size_t block, const BlockStore& other,
                 std::size_t other_block) const noexcept;

  // The epoch views of this store record; null only in a moved-from store.
  const std::shared_ptr<ViewEpoch>& Epoch() const noexcept { return epoch_; }
  // Makes every view taken so far stale. Every mutator below calls it; the
  // caches also call it for changes outside the store (a ring rewind moves
  // only the cursor).
  void InvalidateViews() noexcept {
    if (epoch_ != nullptr) ++epoch_->generation;
  }

 private:
  struct Block {
    Tensor keys;    // [1, Hkv, block_tokens, CarrierColumns(key_dtype, D)]
    Tensor values;  // [1, Hkv, block_tokens, CarrierColumns(value_dtype, Dv)]
  };

  std::shared_ptr<Block> NewBlock() const;
  // Copies the stored rows of `seg` (this layout's, as View() hands them out) into
  // slots [slot, slot + seg length), bits unchanged.
  void WriteStored(std::int64_t slot, const Segment& seg);
  Block& Writable(std::size_t block);

  std::int64_t block_tokens_;
  KvLayout layout_;
  bool has_layout_ = false;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::int64_t head_ = 0;    // row of slot 0 inside blocks_[0], in [0, block_tokens)
  std::int64_t length_ = 0;  // slots; blocks_ covers exactly head_ + length_ rows, rounded up
  std::shared_ptr<ViewEpoch> epoch_;
};

template <class Fn>
void BlockStore::ForEachRun(std::int64_t begin, std::int64_t end, Fn&& fn) const {
  std::int64_t slot = begin;
  while (slot < end) {
    const std::int64_t absolute = head_ + slot;
    const auto block = static_cast<std::size_t>(absolute / block_tokens_);
    const std::int64_t row = absolute % block_tokens_;
    const std::int64_t count = std::min(block_tokens_ - row, end - slot);
    fn(block, row, count);
    slot += count;
  }
}

template <class Fn>
void BlockStore::ForEachBlock(Fn&& fn) const {
  for (const std::shared_ptr<Block>& block : blocks_) {
    fn(static_cast<const void*>(block.get()), block->keys.NumBytes() + block->values.NumBytes());
  }
}

template <class Fn>
void BlockStore::ForEachSegment(std::int64_t begin, std::int64_t end, Fn&& fn) const {
  ForEachRun(begin, end, [&](std::size_t block, std::int64_t row, std::int64_t count) {
    fn(View(block, row, count));
  });
}

}  // namespace ringkv::detail
