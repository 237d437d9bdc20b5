#pragma once
// KVCache: the full history of one attention layer (the reference's KVCache).
// Storage is paged (see docs/caches.md): appending is O(1) in the cache length,
// snapshots share blocks, and attention reads the blocks in place.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "ringkv/cache.h"

namespace ringkv {

namespace detail {
class BlockStore;
class SpeculativeKvCache;
class IsolatedKvCache;
}  // namespace detail

class KVCache final : public AttentionCache {
 public:
  static constexpr std::int64_t kDefaultBlockTokens = 256;

  // block_tokens: tokens per storage block (>= 1, else ringkv::Error).
  // storage_dtype: the dtype the blocks hold K and V in (f32, f16, bf16, int8 or
  // int4). Set, Update takes keys and values of any float dtype (they may
  // differ) and converts (or quantizes) them in its one copy into the blocks;
  // unset, the first Update's dtype is kept. Another value throws ringkv::Error.
  explicit KVCache(std::int64_t block_tokens = kDefaultBlockTokens,
                   std::optional<DType> storage_dtype = std::nullopt);
  // K and V in their own storage dtypes, e.g. KvStorage{DType::kI8, DType::kI4}
  // (kv_storage.h says which pairs are allowed; others throw ringkv::Error).
  KVCache(std::int64_t block_tokens, KvStorage storage);
  ~KVCache() override;
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;

  // Appends [1, Hkv, L, D] keys and [1, Hkv, L, Dv] values (L >= 1, B == 1; heads,
  // dims and dtype fixed from the first Update until Free) of any strides, e.g.
  // Tensor::Borrow(k, dtype, {L, Hkv, D}).Permute({1, 0, 2}).Unsqueeze(0), read in
  // place: Update allocates only to open a block (every BlockTokens() tokens) or
  // to copy one a snapshot shares before its first write.
  // The history is keys [0, Offset()) with no mask rewriting.
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  // The current history without writing (empty view when nothing is stored).
  KVHistory View() const;

  KvView State() const override;
  void Free() noexcept override;
  int Offset() const noexcept override { return offset_; }
  std::unique_ptr<ringkv::Snapshot> Snapshot(int from_offset) const override;
  bool Restore(const ringkv::Snapshot* snapshot, int target) override;
  std::unique_ptr<ringkv::Snapshot> Merge(std::unique_ptr<ringkv::Snapshot>&& parent,
                                          std::unique_ptr<ringkv::Snapshot>&& child) const override;
  std::pair<std::unique_ptr<ringkv::Snapshot>, std::unique_ptr<ringkv::Snapshot>> Split(
      std::unique_ptr<ringkv::Snapshot>&& snapshot, int at) const override;

  // A second cache with the same contents, sharing every block copy-on-write: O(blocks).
  KVCache Fork() const;
  void Swap(KVCache& other) noexcept;

  std::int64_t BlockTokens() const noexcept;
  std::optional<KvStorage> Storage() const noexcept override { return storage_; }
  // Bytes of storage blocks this cache references (shared blocks counted in full).
  std::size_t AllocatedBytes() const noexcept;

 private:
  friend class detail::SpeculativeKvCache;
  friend class detail::IsolatedKvCache;

  bool Rewindable(int target) const noexcept override;  // target <= Offset()

  std::unique_ptr<detail::BlockStore> store_;  // slots [0, Offset()) are the live tokens
  int offset_ = 0;
  std::optional<KvStorage> storage_;  // the blocks' dtypes when fixed at construction
};

}  // namespace ringkv
