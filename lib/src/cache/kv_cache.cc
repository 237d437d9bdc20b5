#include "ringkv/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>

#include "block_store.h"
#include "kv_access.h"
#include "kv_input.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "snapshots.h"

namespace ringkv {
namespace detail {

const KvSnapshot& AsKv(const char* function, const Snapshot& snapshot) {
  const auto* kv = dynamic_cast<const KvSnapshot*>(&snapshot);
  if (kv == nullptr) {
    throw SnapshotError(fmt::format(
        "[{}] the snapshot was made by another cache kind (a RotatingKVCache), not a KVCache",
        function));
  }
  return *kv;
}

void CheckKvMerge(const char* function, const KvSnapshot& parent, const KvSnapshot& child) {
  if (parent.ToOffset() != child.FromOffset()) {
    throw SnapshotError(fmt::format("[{}] parent covers [{}, {}), child [{}, {}): not adjacent",
                                    function, parent.FromOffset(), parent.ToOffset(),
                                    child.FromOffset(), child.ToOffset()));
  }
  const KvLayout& p = parent.Data().Layout();
  const KvLayout& c = child.Data().Layout();
  if (!(p == c)) {
    throw SnapshotError(fmt::format(
        "[{}] the parent holds heads {} head dims {}/{} {}, the child heads {} head dims {}/{} {}",
        function, p.heads, p.k_dim, p.v_dim, DtypesName(p.key_dtype, p.value_dtype), c.heads,
        c.k_dim, c.v_dim, DtypesName(c.key_dtype, c.value_dtype)));
  }
}

void CheckRestoreLayout(const char* function, const BlockStore& snapshot, const BlockStore& cache) {
  if (!cache.HasLayout() || snapshot.Layout() == cache.Layout()) return;
  const KvLayout& s = snapshot.Layout();
  const KvLayout& c = cache.Layout();
  throw SnapshotError(fmt::format(
      "[{}] the snapshot holds heads {} head dims {}/{} {}, the cache heads {} head dims {}/{} {}",
      function, s.heads, s.k_dim, s.v_dim, DtypesName(s.key_dtype, s.value_dtype), c.heads, c.k_dim,
      c.v_dim, DtypesName(c.key_dtype, c.value_dtype)));
}

std::unique_ptr<Snapshot> MergeKv(const KvSnapshot& parent, const KvSnapshot& child) {
  BlockStore merged = parent.Data();
  merged.AppendFrom(child.Data(), 0, child.Data().Length());
  return std::make_unique<KvSnapshot>(std::move(merged), parent.FromOffset(), child.ToOffset());
}

std::int64_t SplitPoint(const Snapshot& snapshot, int at) noexcept {
  return std::int64_t{at} - snapshot.FromOffset();
}

std::pair<std::unique_ptr<Snapshot>, std::unique_ptr<Snapshot>> SplitKv(const KvSnapshot& snapshot,
                                                                        int at) {
  const std::int64_t split = SplitPoint(snapshot, at);
  const std::int64_t length = snapshot.ToOffset() - snapshot.FromOffset();
  Expects(split > 0 && split < length);
  // Both halves share the blocks; the one straddling `at` is shared by both.
  auto first =
      std::make_unique<KvSnapshot>(snapshot.Data().Share(0, split), snapshot.FromOffset(), at);
  auto second =
      std::make_unique<KvSnapshot>(snapshot.Data().Share(split, length), at, snapshot.ToOffset());
  return {std::move(first), std::move(second)};
}

}  // namespace detail

namespace {

using detail::AsKv;

std::unique_ptr<detail::BlockStore> MakeStore(const char* function, std::int64_t block_tokens) {
  if (block_tokens < 1) {
    throw Error(fmt::format("[{}] block_tokens {} must be >= 1", function, block_tokens));
  }
  return std::make_unique<detail::BlockStore>(block_tokens);
}

}  // namespace

KVCache::KVCache(std::int64_t block_tokens, std::optional<DType> storage_dtype)
    : store_(MakeStore("KVCache", block_tokens)),
      storage_(detail::CheckKvStorage("KVCache", detail::BothSides(storage_dtype))) {}
KVCache::KVCache(std::int64_t block_tokens, KvStorage storage)
    : store_(MakeStore("KVCache", block_tokens)),
      storage_(detail::CheckKvStorage("KVCache", storage)) {}
KVCache::~KVCache() = default;
KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;

KVHistory KVCache::Update(const Tensor& keys, const Tensor& values) {
  const detail::KvLayout layout = detail::CheckKvInput(
      "KVCache::Update", keys, values, store_->HasLayout() ? &store_->Layout() : nullptr, storage_);
  const std::int64_t length = keys.Dim(2);
  const int new_offset = detail::AdvancedOffset("KVCache::Update", offset_, length);
  if (!store_->HasLayout()) store_->SetLayout(layout);
  store_->Append(keys, values);
  offset_ = new_offset;
  Ensures(store_->Length() == offset_);
  return detail::MakeHistory(
      State(), detail::MaskApplier{detail::MaskApplier::Kind::kIdentity, length, offset_, 0, 0});
}

KVHistory KVCache::View() const { return detail::MakeHistory(State(), {}); }

KvView KVCache::State() const {
  KvView view;
  if (offset_ > 0) detail::AddRange(view, store_.get(), 0, offset_);
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
    if (!Rewindable(target)) return false;
    offset_ = target;
    store_->Resize(target);  // releases the blocks past the new end
    return true;
  }
  const detail::KvSnapshot& snap = AsKv("KVCache::Restore", *snapshot);
  detail::CheckRestoreLayout("KVCache::Restore", snap.Data(), *store_);
  detail::CheckSnapshotDtype("KVCache::Restore", snap.Data(), storage_);
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

bool KVCache::Rewindable(int target) const noexcept { return target <= offset_; }

std::unique_ptr<Snapshot> KVCache::Merge(std::unique_ptr<ringkv::Snapshot>&& parent,
                                         std::unique_ptr<ringkv::Snapshot>&& child) const {
  const detail::KvSnapshot* p = parent == nullptr ? nullptr : &AsKv("KVCache::Merge", *parent);
  const detail::KvSnapshot* c = child == nullptr ? nullptr : &AsKv("KVCache::Merge", *child);
  std::unique_ptr<ringkv::Snapshot> merged;
  if (p != nullptr && c != nullptr) {
    detail::CheckKvMerge("KVCache::Merge", *p, *c);
    merged = detail::MergeKv(*p, *c);
  }
  // Consumed only now that nothing can fail (with a null side: both released,
  // as in the reference).
  parent.reset();
  child.reset();
  return merged;
}

std::pair<std::unique_ptr<Snapshot>, std::unique_ptr<Snapshot>> KVCache::Split(
    std::unique_ptr<ringkv::Snapshot>&& snapshot, int at) const {
  if (snapshot == nullptr) return {nullptr, nullptr};
  const detail::KvSnapshot& snap = AsKv("KVCache::Split", *snapshot);
  const std::int64_t split = detail::SplitPoint(snap, at);
  if (split <= 0) return {nullptr, std::move(snapshot)};
  if (split >= snap.ToOffset() - snap.FromOffset()) return {std::move(snapshot), nullptr};
  auto halves = detail::SplitKv(snap, at);
  snapshot.reset();
  return halves;
}

KVCache KVCache::Fork() const {
  KVCache fork(store_->BlockTokens());
  fork.storage_ = storage_;
  *fork.store_ = *store_;
  fork.offset_ = offset_;
  return fork;
}

void KVCache::Swap(KVCache& other) noexcept {
  store_->InvalidateViews();
  other.store_->InvalidateViews();
  std::swap(store_, other.store_);
  std::swap(offset_, other.offset_);
  std::swap(storage_, other.storage_);
}

std::int64_t KVCache::BlockTokens() const noexcept { return store_->BlockTokens(); }
std::size_t KVCache::AllocatedBytes() const noexcept { return store_->AllocatedBytes(); }

}  // namespace ringkv
