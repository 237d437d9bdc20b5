#include "ringkv/rotating_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>

#include "block_store.h"
#include "kv_access.h"
#include "kv_input.h"
#include "ringkv/error.h"
#include "snapshots.h"

namespace ringkv {
namespace detail {

const RotatingSnapshot& AsRing(const char* function, const char* role, const Snapshot& snapshot,
                               int window) {
  const auto* ring = dynamic_cast<const RotatingSnapshot*>(&snapshot);
  if (ring == nullptr) {
    throw SnapshotError(
        fmt::format("[{}] the {} was made by another cache kind (a KVCache), not a RotatingKVCache",
                    function, role));
  }
  if (ring->Window() != window) {
    throw SnapshotError(fmt::format("[{}] the {} holds a window of {}, the cache {}", function,
                                    role, ring->Window(), window));
  }
  return *ring;
}

}  // namespace detail

namespace {

int CheckMaxSize(int max_size) {
  if (max_size < 1) {
    throw Error(fmt::format("[RotatingKVCache] max_size {} must be >= 1", max_size));
  }
  return max_size;
}

std::unique_ptr<detail::BlockStore> MakeStore(std::int64_t block_tokens) {
  if (block_tokens < 1) {
    throw Error(fmt::format("[RotatingKVCache] block_tokens {} must be >= 1", block_tokens));
  }
  return std::make_unique<detail::BlockStore>(block_tokens);
}

}  // namespace

RotatingKVCache::RotatingKVCache(int max_size, std::int64_t block_tokens,
                                 std::optional<DType> storage_dtype)
    : max_size_(CheckMaxSize(max_size)),
      store_(MakeStore(block_tokens)),
      storage_(detail::CheckKvStorage("RotatingKVCache", detail::BothSides(storage_dtype))) {}
RotatingKVCache::RotatingKVCache(int max_size, std::int64_t block_tokens, KvStorage storage)
    : max_size_(CheckMaxSize(max_size)),
      store_(MakeStore(block_tokens)),
      storage_(detail::CheckKvStorage("RotatingKVCache", storage)) {}
RotatingKVCache::~RotatingKVCache() = default;
RotatingKVCache::RotatingKVCache(RotatingKVCache&&) noexcept = default;
RotatingKVCache& RotatingKVCache::operator=(RotatingKVCache&&) noexcept = default;

KVHistory RotatingKVCache::Update(const Tensor& keys, const Tensor& values) {
  const detail::KvLayout layout =
      detail::CheckKvInput("RotatingKVCache::Update", keys, values,
                           store_->HasLayout() ? &store_->Layout() : nullptr, storage_);
  (void)detail::AdvancedOffset("RotatingKVCache::Update", offset_, keys.Dim(2));
  if (!store_->HasLayout()) store_->SetLayout(layout);
  const std::int64_t key_len = AppendKv(keys, values);
  KvView view;
  detail::AddRange(view, store_.get(), 0, key_len);
  return detail::MakeHistory(
      view, detail::MaskApplier{detail::MaskApplier::Kind::kRotating, keys.Dim(2), key_len,
                                max_size_, idx_, offset_ - key_len});
}

std::int64_t RotatingKVCache::AppendKv(const Tensor& keys, const Tensor& values) {
  if (keys.Dim(2) > 1) {
    Concat(keys, values);
    return store_->Length();
  }
  UpdateInPlace(keys, values);
  return std::min<std::int64_t>(offset_, max_size_);
}

void RotatingKVCache::Concat(const Tensor& keys, const Tensor& values) {
  if (!has_buffer_) {
    store_->Clear();
    store_->Append(keys, values);
    has_buffer_ = true;
  } else {
    const std::int64_t dim = store_->Length();
    if (idx_ < dim) {
      if (offset_ <= max_size_) {
        // Not wrapped: slots [idx, dim) are growth padding or stale data from
        // before a rewind, not part of the window.
        store_->Resize(idx_);
      } else {
        // Wrapped: logical order is slots [idx, dim) then [0, idx). Copy the part
        // the trim below would keep (the last max_size - 1) into oldest-first order.
        const std::int64_t drop = std::max<std::int64_t>(0, dim - max_size_ + 1);
        detail::BlockStore linear(store_->BlockTokens());
        linear.SetLayout(store_->Layout());
        if (idx_ + drop < dim) {
          linear.AppendCopyOf(*store_, idx_ + drop, dim);
          linear.AppendCopyOf(*store_, 0, idx_);
        } else {
          linear.AppendCopyOf(*store_, idx_ + drop - dim, idx_);
        }
        *store_ = std::move(linear);
        idx_ = gsl::narrow<int>(store_->Length());
      }
    }
    // Keep max_size - 1 old tokens so the first new query sees a full window.
    if (const std::int64_t trim = idx_ - max_size_ + 1; trim > 0) {
      Expects(trim <= store_->Length());
      store_->DropFront(trim);
    }
    store_->Append(keys, values);
  }
  offset_ += gsl::narrow<int>(keys.Dim(2));
  idx_ = gsl::narrow<int>(store_->Length());
}

void RotatingKVCache::UpdateInPlace(const Tensor& keys, const Tensor& values) {
  const int prev = offset_;
  const std::int64_t dim = store_->Length();
  if (!has_buffer_ || (prev >= dim && dim < max_size_)) {
    // Grow in steps while below max_size (zero slots, like the reference).
    const int grow = std::min(kGrowStep, max_size_ - prev);
    Expects(grow > 0);
    if (!has_buffer_) store_->Clear();
    store_->Resize((has_buffer_ ? dim : 0) + grow);
    has_buffer_ = true;
    idx_ = prev;
  }
  // A prefill may have left more than max_size slots: drop the oldest.
  if (const std::int64_t trim = store_->Length() - max_size_; trim > 0) {
    store_->DropFront(trim);
    idx_ = max_size_;
  }
  if (idx_ >= max_size_) idx_ = 0;  // wrap
  Expects(idx_ + 1 <= store_->Length());
  store_->Write(idx_, keys, values);
  offset_ += 1;
  idx_ += 1;
}

KVHistory RotatingKVCache::View() const {
  return detail::MakeHistory(LogicalTail(max_size_ - 1), {});
}

KvView RotatingKVCache::LogicalTail(std::int64_t keep) const {
  KvView view;
  if (!has_buffer_ || keep <= 0) return view;
  const std::int64_t k = std::min<std::int64_t>(offset_, store_->Length());
  if (k == 0) return view;
  keep = std::min(keep, k);
  const std::int64_t start = k - keep;  // logical index of the first kept token
  if (k > max_size_ || offset_ < max_size_) {
    detail::AddRange(view, store_.get(), start, k);  // storage order is logical order
    return view;
  }
  // Logical index j lives at slot (oldest + j) mod k.
  const std::int64_t oldest = idx_ % k;
  const std::int64_t tail = k - oldest;  // logical [0, tail) = slots [oldest, k)
  if (start < tail) {
    detail::AddRange(view, store_.get(), oldest + start, k);
    if (oldest > 0) detail::AddRange(view, store_.get(), 0, oldest);
  } else {
    detail::AddRange(view, store_.get(), start - tail, oldest);
  }
  return view;
}

KvView RotatingKVCache::State() const {
  KvView view;
  if (!has_buffer_) return view;
  const std::int64_t live = std::min<std::int64_t>(offset_, store_->Length());
  if (live > 0) detail::AddRange(view, store_.get(), 0, live);
  return view;
}

void RotatingKVCache::Free() noexcept {
  store_->Reset();
  has_buffer_ = false;
  offset_ = 0;
  idx_ = 0;
}

std::unique_ptr<Snapshot> RotatingKVCache::Snapshot(int from_offset) const {
  if (from_offset > offset_) {
    throw Error(fmt::format("[RotatingKVCache::Snapshot] from_offset {} is beyond the offset {}",
                            from_offset, offset_));
  }
  if (!has_buffer_ || offset_ <= from_offset) return nullptr;
  const std::int64_t live = std::min<std::int64_t>(offset_, store_->Length());
  return std::make_unique<detail::RotatingSnapshot>(store_->Share(0, live), from_offset, offset_,
                                                    idx_, max_size_);
}

bool RotatingKVCache::Restore(const ringkv::Snapshot* snapshot, int target) {
  detail::CheckTarget("RotatingKVCache::Restore", target);
  if (snapshot == nullptr) {
    if (!Rewindable(target)) return false;
    store_->InvalidateViews();  // a successful Restore, like any other
    if (target < offset_) {     // (at the offset, a wrapped ring keeps its cursor)
      offset_ = target;
      idx_ = target;
    }
    return true;
  }
  const detail::RotatingSnapshot& snap =
      detail::AsRing("RotatingKVCache::Restore", "snapshot", *snapshot, max_size_);
  detail::CheckRestoreLayout("RotatingKVCache::Restore", snap.Data(), *store_);
  detail::CheckSnapshotDtype("RotatingKVCache::Restore", snap.Data(), storage_);
  if (target > snap.ToOffset()) return false;
  // Clamping a snapshot whose window has moved would leave an incomplete window.
  if (target < snap.ToOffset() && snap.ToOffset() > max_size_) return false;
  // Shares the blocks (the next write clones the one it touches) when the block
  // sizes agree, else copies into this cache's block size.
  detail::BlockStore restored(store_->BlockTokens());
  restored.SetLayout(snap.Data().Layout());
  restored.AppendFrom(snap.Data(), 0, snap.Data().Length());
  *store_ = std::move(restored);
  has_buffer_ = true;
  offset_ = snap.ToOffset();
  idx_ = snap.RingIndex();
  if (target < offset_) {
    offset_ = target;
    idx_ = target;
  }
  return true;
}

bool RotatingKVCache::Rewindable(int target) const noexcept {
  if (target >= offset_) return target == offset_;
  // Once the window has moved, the tokens before it are gone: rewinding would
  // leave fewer than max_size keys to attend to. (mlx-lm's is_trimmable stops one
  // token earlier, at offset < max_size; at offset == max_size nothing has been
  // dropped yet, so the rewind is exact.)
  return offset_ <= max_size_;
}

std::unique_ptr<Snapshot> RotatingKVCache::Merge(std::unique_ptr<ringkv::Snapshot>&& parent,
                                                 std::unique_ptr<ringkv::Snapshot>&& child) const {
  constexpr const char* kFn = "RotatingKVCache::Merge";
  if (parent != nullptr) (void)detail::AsRing(kFn, "parent", *parent, max_size_);
  if (child != nullptr) (void)detail::AsRing(kFn, "child", *child, max_size_);
  parent.reset();  // the child holds the whole window
  return std::move(child);
}

std::pair<std::unique_ptr<Snapshot>, std::unique_ptr<Snapshot>> RotatingKVCache::Split(
    std::unique_ptr<ringkv::Snapshot>&& snapshot, int /*at*/) const {
  if (snapshot != nullptr) {
    (void)detail::AsRing("RotatingKVCache::Split", "snapshot", *snapshot, max_size_);
  }
  return {nullptr, std::move(snapshot)};
}

RotatingKVCache RotatingKVCache::Fork() const {
  RotatingKVCache fork(max_size_, store_->BlockTokens());
  fork.storage_ = storage_;
  *fork.store_ = *store_;
  fork.has_buffer_ = has_buffer_;
  fork.offset_ = offset_;
  fork.idx_ = idx_;
  return fork;
}

void RotatingKVCache::Swap(RotatingKVCache& other) noexcept {
  store_->InvalidateViews();
  other.store_->InvalidateViews();
  std::swap(max_size_, other.max_size_);
  std::swap(store_, other.store_);
  std::swap(has_buffer_, other.has_buffer_);
  std::swap(offset_, other.offset_);
  std::swap(idx_, other.idx_);
  std::swap(storage_, other.storage_);
}

std::int64_t RotatingKVCache::BufferLength() const noexcept { return store_->Length(); }
std::int64_t RotatingKVCache::BlockTokens() const noexcept { return store_->BlockTokens(); }
std::size_t RotatingKVCache::AllocatedBytes() const noexcept { return store_->AllocatedBytes(); }

}  // namespace ringkv
