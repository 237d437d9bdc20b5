#include "ringkv/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>

#include "block_store.h"
#include "kv_input.h"
#include "ringkv/error.h"
#include "snapshots.h"

namespace ringkv {
namespace {

const detail::KvSnapshot& AsKv(const char* function, const Snapshot& snapshot) {
  const auto* kv = dynamic_cast<const detail::KvSnapshot*>(&snapshot);
  if (kv == nullptr) {
    throw SnapshotError(fmt::format(
        "[{}] the snapshot was made by another cache kind (a RotatingKVCache), not a KVCache",
        function));
  }
  return *kv;
}

std::unique_ptr<detail::BlockStore> MakeStore(const char* function, std::int64_t block_tokens) {
  if (block_tokens < 1) {
    throw Error(fmt::format("[{}] block_tokens {} must be >= 1", function, block_tokens));
  }
  return std::make_unique<detail::BlockStore>(block_tokens);
}

}  // namespace

KVCache::KVCache(std::int64_t block_tokens) : store_(MakeStore("KVCache", block_tokens)) {}
KVCache::~KVCache() = default;
KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;

KVHistory KVCache::Update(const Tensor& keys, const Tensor& values) {
  const detail::KvLayout layout = detail::CheckKvInput(
      "KVCache::Update", keys, values, store_->HasLayout() ? &store_->Layout() : nullptr);
  const std::int64_t length = keys.Dim(2);
  const int new_offset = gsl::narrow<int>(offset_ + length);
  if (!store_->HasLayout()) store_->SetLayout(layout);
  store_->Append(keys, values);
  offset_ = new_offset;
  Ensures(store_->Length() == offset_);
  return KVHistory(State(), MaskApplier{MaskApplier::Kind::kIdentity, length, offset_, 0, 0});
}

KVHistory KVCache::View() const { return KVHistory(State()); }

KvView KVCache::State() const {
  KvView view;
  if (offset_ > 0) view.AddRange(store_.get(), 0, offset_);
  return view;
}

void KVCache::Free() noexcept {
  store_->Reset();
  offset_ = 0;
}

std::unique_ptr<Snapshot> KVCache::Snapshot(int from_offset) const {
  if (from_offset > offset_) {
    throw Error(fmt::format("[KVCache::Snapshot] from_offset {} is beyond the offset {}",
                            from_offset, offset_));
  }
  const int from = std::max(0, from_offset);
  if (offset_ <= from) return nullptr;
  return std::make_unique<detail::KvSnapshot>(store_->Share(from, offset_), from, offset_);
}

bool KVCache::Restore(const ringkv::Snapshot* snapshot, int target) {
  detail::CheckTarget("KVCache::Restore", target);
  if (snapshot == nullptr) {
    if (target > offset_) return false;
    offset_ = target;
    store_->Resize(target);  // releases the blocks past the new end
    return true;
  }
  const detail::KvSnapshot& snap = AsKv("KVCache::Restore", *snapshot);
  if (store_->HasLayout() && !(snap.Data().Layout() == store_->Layout())) {
    throw SnapshotError(fmt::format(
        "[KVCache::Restore] the snapshot holds heads {} head dims {}/{} {}, the cache heads {} "
        "head dims {}/{} {}",
        snap.Data().Layout().heads, snap.Data().Layout().k_dim, snap.Data().Layout().v_dim,
        DTypeName(snap.Data().Layout().dtype), store_->Layout().heads, store_->Layout().k_dim,
        store_->Layout().v_dim, DTypeName(store_->Layout().dtype)));
  }
  if (target > snap.ToOffset() || offset_ < snap.FromOffset()) return false;
  // Rewind to the snapshot's start, then append its tokens: aligned blocks are
  // shared, at most the one boundary block is copied.
  store_->Resize(snap.FromOffset());
  store_->AppendFrom(snap.Data(), 0, snap.Data().Length());
  offset_ = snap.ToOffset();
  if (target < offset_) {
    offset_ = target;
    store_->Resize(target);
  }
  Ensures(store_->Length() == offset_);
  return true;
}

std::unique_ptr<Snapshot> KVCache::Merge(std::unique_ptr<ringkv::Snapshot> parent,
                                         std::unique_ptr<ringkv::Snapshot> child) const {
  if (parent == nullptr || child == nullptr) return nullptr;  // both released
  const detail::KvSnapshot& p = AsKv("KVCache::Merge", *parent);
  const detail::KvSnapshot& c = AsKv("KVCache::Merge", *child);
  if (p.ToOffset() != c.FromOffset()) {
    throw SnapshotError(
        fmt::format("[KVCache::Merge] parent covers [{}, {}), child [{}, {}): not adjacent",
                    p.FromOffset(), p.ToOffset(), c.FromOffset(), c.ToOffset()));
  }
  if (!(p.Data().Layout() == c.Data().Layout())) {
    throw SnapshotError("[KVCache::Merge] parent and child hold different K/V layouts");
  }
  detail::BlockStore merged = p.Data();
  merged.AppendFrom(c.Data(), 0, c.Data().Length());
  return std::make_unique<detail::KvSnapshot>(std::move(merged), p.FromOffset(), c.ToOffset());
}

std::pair<std::unique_ptr<Snapshot>, std::unique_ptr<Snapshot>> KVCache::Split(
    std::unique_ptr<ringkv::Snapshot> snapshot, int at) const {
  if (snapshot == nullptr) return {nullptr, nullptr};
  const detail::KvSnapshot& snap = AsKv("KVCache::Split", *snapshot);
  const int split = at - snap.FromOffset();
  const int length = snap.ToOffset() - snap.FromOffset();
  if (split <= 0) return {nullptr, std::move(snapshot)};
  if (split >= length) return {std::move(snapshot), nullptr};
  // Both halves share the blocks; the one straddling `at` is shared by both.
  auto first =
      std::make_unique<detail::KvSnapshot>(snap.Data().Share(0, split), snap.FromOffset(), at);
  auto second =
      std::make_unique<detail::KvSnapshot>(snap.Data().Share(split, length), at, snap.ToOffset());
  return {std::move(first), std::move(second)};
}

KVCache KVCache::Fork() const {
  KVCache fork(store_->BlockTokens());
  *fork.store_ = *store_;
  fork.offset_ = offset_;
  return fork;
}

void KVCache::Swap(KVCache& other) noexcept {
  std::swap(store_, other.store_);
  std::swap(offset_, other.offset_);
}

std::int64_t KVCache::BlockTokens() const noexcept { return store_->BlockTokens(); }
std::size_t KVCache::AllocatedBytes() const noexcept { return store_->AllocatedBytes(); }

}  // namespace ringkv
