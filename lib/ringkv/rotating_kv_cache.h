#pragma once
// RotatingKVCache: a sliding window of max_size tokens (the reference's
// RotatingKVCache, slot for slot). Decode (L == 1) writes in place at the ring
// index and wraps; prefill (L > 1) brings a wrapped ring back to oldest-first
// order, keeps the last max_size - 1 old tokens and appends all new ones (so the
// buffer may briefly hold more than max_size slots). docs/caches.md has the
// ring arithmetic.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "ringkv/cache.h"

namespace ringkv {

namespace detail {
class BlockStore;
class SpeculativeRotatingKvCache;
}  // namespace detail

class RotatingKVCache final : public AttentionCache {
 public:
  static constexpr std::int64_t kDefaultBlockTokens = 256;
  // Slots added per decode growth step while below max_size (the reference's step).
  static constexpr int kGrowStep = 256;

  // max_size >= 1 and block_tokens >= 1, else ringkv::Error. storage_dtype and
  // storage as in KVCache: the blocks' dtypes (quantized ones included), inputs
  // of any float dtype converted as they are copied.
  explicit RotatingKVCache(int max_size, std::int64_t block_tokens = kDefaultBlockTokens,
                           std::optional<DType> storage_dtype = std::nullopt);
  RotatingKVCache(int max_size, std::int64_t block_tokens, KvStorage storage);
  ~RotatingKVCache() override;
  RotatingKVCache(RotatingKVCache&&) noexcept;
  RotatingKVCache& operator=(RotatingKVCache&&) noexcept;

  // Appends [1, Hkv, L, D] keys and [1, Hkv, L, Dv] values, of any strides (as in
  // KVCache::Update). The history is in storage (ring) order and carries the
  // rotating mask applier.
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  // The last max_size - 1 tokens in logical (oldest-first) order, no mask rewriting.
  KVHistory View() const;

  // Slots [0, min(Offset(), buffer length)) in storage order.
  KvView State() const override;
  void Free() noexcept override;
  int Offset() const noexcept override { return offset_; }
  std::unique_ptr<ringkv::Snapshot> Snapshot(int from_offset) const override;
  bool Restore(const ringkv::Snapshot* snapshot, int target) override;
  // The child supersedes the parent (it holds the whole window).
  std::unique_ptr<ringkv::Snapshot> Merge(std::unique_ptr<ringkv::Snapshot>&& parent,
                                          std::unique_ptr<ringkv::Snapshot>&& child) const override;
  // Cannot split a ring: returns {null, snapshot}.
  std::pair<std::unique_ptr<ringkv::Snapshot>, std::unique_ptr<ringkv::Snapshot>> Split(
      std::unique_ptr<ringkv::Snapshot>&& snapshot, int at) const override;

  RotatingKVCache Fork() const;
  void Swap(RotatingKVCache& other) noexcept;

  int MaxSize() const noexcept { return max_size_; }
  int RingIndex() const noexcept { return idx_; }  // next decode write slot (before wrap)
  std::int64_t BufferLength() const noexcept;      // slots held (the reference's Dim(2))
  std::int64_t BlockTokens() const noexcept;
  std::optional<KvStorage> Storage() const noexcept override { return storage_; }
  std::size_t AllocatedBytes() const noexcept;

 private:
  friend class detail::SpeculativeRotatingKvCache;

  // The reference's appendKV: concat path for L > 1, in-place path for L == 1.
  // Inputs are validated by the caller.
  std::int64_t AppendKv(const Tensor& keys, const Tensor& values);
  void Concat(const Tensor& keys, const Tensor& values);
  void UpdateInPlace(const Tensor& keys, const Tensor& values);
  // The last `keep` live tokens in logical order (the reference's logicalTail).
  KvView LogicalTail(std::int64_t keep) const;
  // target == Offset(), or target < Offset() while Offset() <= max_size (see Restore).
  bool Rewindable(int target) const noexcept override;

  int max_size_;
  std::unique_ptr<detail::BlockStore> store_;  // ring slots; see docs/caches.md
  bool has_buffer_ = false;                    // the reference's keys != nil
  int offset_ = 0;                             // tokens ever appended (minus rewinds)
  int idx_ = 0;                                // ring write cursor
  std::optional<KvStorage> storage_;           // the blocks' dtypes when fixed at construction
};

}  // namespace ringkv
