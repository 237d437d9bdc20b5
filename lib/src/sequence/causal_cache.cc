#include "ringkv/causal_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>

#include "cache/kv_input.h"
#include "cache/stored_rows.h"
#include "causal_cache_impl.h"
#include "ringkv/error.h"
#include "sliding_window.h"
#include "strided_copy.h"

namespace ringkv {

CausalCache::CausalCache(CausalCacheOptions options)
    : impl_(std::make_unique<Impl>(detail::ResolveCausalOptions(std::move(options)))) {}
CausalCache::~CausalCache() = default;
// SequenceCache has no state to move (and no move operations): only impl_ moves.
CausalCache::CausalCache(CausalCache&& other) noexcept : impl_(std::move(other.impl_)) {}
CausalCache& CausalCache::operator=(CausalCache&& other) noexcept {
  impl_ = std::move(other.impl_);
  return *this;
}

void CausalCache::StartForward(const Batch& batch, ForwardMode mode) {
  Expects(impl_ != nullptr);
  if (mode == ForwardMode::kReserve) {
    impl_->StartReserve(batch);
  } else if (mode == ForwardMode::kStore) {
    impl_->StartStore(batch);
  } else {
    throw Error(fmt::format("[{}] mode {} is not kStore or kReserve", detail::kStartForward,
                            static_cast<int>(mode)));
  }
}

void CausalCache::SetNonCausalRows(std::span<const std::int64_t> rows) {
  constexpr const char* kFunction = "CausalCache::SetNonCausalRows";
  impl_->CheckPass(kFunction);
  for (const std::int64_t r : rows) {
    if (r < 0 || r >= impl_->pass_rows) {
      throw Error(fmt::format("[{}] row {} is outside the pass's rows [0, {})", kFunction, r,
                              impl_->pass_rows));
    }
  }
  if (impl_->pass == detail::PassKind::kReserve) return;
  detail::BatchPlan& plan = *impl_->WritablePlan();
  std::copy(impl_->ends.causal.begin(), impl_->ends.causal.end(), plan.row_hi.begin());
  for (const std::int64_t r : rows) {
    const auto i = static_cast<std::size_t>(r);
    plan.row_hi[i] = impl_->ends.all[i];
  }
}

BatchHistory CausalCache::Update(int layer, const Tensor& keys, const Tensor& values) {
  constexpr const char* kFunction = "CausalCache::Update";
  Impl& impl = *impl_;
  impl.CheckPass(kFunction);
  impl.CheckLayer(kFunction, layer);
  const detail::PoolLayout& layout = impl.Layout();
  const detail::KvLayout established{layout.key_dtype, layout.value_dtype, layout.heads,
                                     layout.key_dim, layout.value_dim};
  detail::CheckKvInput(kFunction, keys, values, &established,
                       KvStorage{layout.key_dtype, layout.value_dtype});
  if (keys.Dim(2) != impl.pass_rows) {
    throw ShapeError(fmt::format("[{}] keys dim 2 (tokens) is {}, but the forward pass has {}",
                                 kFunction, keys.Dim(2), impl.pass_rows));
  }
  // One pass per run: converts, or quantizes, as it copies into the blocks.
  const kernels::KernelTable& table = kernels::BestKernels();
  for (const detail::WriteRun& w : impl.writes) {
    Tensor k = impl.pool->Keys(w.block, layer, w.block_row, w.count);
    Tensor v = impl.pool->Values(w.block, layer, w.block_row, w.count);
    detail::StoreRows(keys.Slice(2, w.first_row, w.first_row + w.count), layout.key_dtype,
                      layout.key_dim, k, table);
    detail::StoreRows(values.Slice(2, w.first_row, w.first_row + w.count), layout.value_dtype,
                      layout.value_dim, v, table);
  }
  return impl.History(layer);
}

BatchHistory CausalCache::Get(int layer) const {
  constexpr const char* kFunction = "CausalCache::Get";
  impl_->CheckPass(kFunction);
  impl_->CheckLayer(kFunction, layer);
  return impl_->History(layer);
}

void CausalCache::CopyPrefix(SequenceId src, SequenceId dst, Position len) {
  constexpr const char* kFunction = "CausalCache::CopyPrefix";
  Impl& impl = *impl_;
  if (len < 0) throw Error(fmt::format("[{}] len {} is negative", kFunction, len));
  SequenceSlot& from = impl.Known(kFunction, src);
  if (src == dst) {
    impl.Truncate(from, len);
    return;
  }
  SequenceSlot& to = impl.SlotFor(kFunction, dst);
  impl.scratch.assign(from.extents.begin(), from.extents.end());
  detail::KeepBelow(impl.scratch, len);
  to.extents.reserve(impl.scratch.size());
  // Continue in the last shared block only past its high water (Assign picks it as the tail).
  to.tail = kNoBlock;
  impl.Assign(to, dst, impl.scratch);
  impl.EndPass();
}

bool CausalCache::CanResume(SequenceId seq, Position pos) const {
  const Impl& impl = *impl_;
  if (!impl.Windowed()) return true;
  const SequenceSlot* slot = impl.table.Find(seq);
  if (slot == nullptr) return false;
  return detail::CanResumeAt(slot->extents, pos, impl.options.window);
}

void CausalCache::Remove(SequenceId seq, Position begin, Position end) {
  constexpr const char* kFunction = "CausalCache::Remove";
  Impl& impl = *impl_;
  if (begin < 0 || end < begin) {
    throw Error(
        fmt::format("[{}] the range [{}, {}) is not 0 <= begin <= end", kFunction, begin, end));
  }
  SequenceSlot* slot = impl.table.Find(seq);
  if (slot == nullptr || begin == end) return;  // nothing held there (as the reference)
  if (end == kEndOfSequence) {
    impl.Truncate(*slot, begin);
  } else {
    impl.RemoveAndShift(kFunction, *slot, begin, end);
  }
}

std::unique_ptr<SequenceCache::State> CausalCache::SaveState() const {
  const Impl& impl = *impl_;
  std::vector<SequenceSlot> sequences;
  ExtentList all;
  for (const SequenceSlot& s : impl.table.Slots()) {
    if (!s.live) continue;
    sequences.push_back(s);
    all.insert(all.end(), s.extents.begin(), s.extents.end());
  }
  return std::make_unique<detail::CausalState>(impl.pool, std::move(sequences), all);
}

void CausalCache::RestoreState(const State& state) {
  constexpr const char* kFunction = "CausalCache::RestoreState";
  Impl& impl = *impl_;
  const auto* saved = dynamic_cast<const detail::CausalState*>(&state);
  if (saved == nullptr || saved->Pool() != impl.pool.get()) {
    throw Error(fmt::format("[{}] the state was saved by {}, not this cache", kFunction,
                            saved == nullptr ? "another cache kind" : "another CausalCache"));
  }
  std::vector<SequenceSlot>& slots = impl.table.Slots();
  const std::vector<SequenceSlot>& records = saved->Sequences();
  Expects(records.size() <= slots.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    slots[i].extents.reserve(records[i].extents.size());
  }
  for (const SequenceSlot& r : records) impl.delta.Add(r.extents, +1);
  for (const SequenceSlot& s : slots) {
    if (s.live) impl.delta.Add(s.extents, -1);
  }
  impl.delta.Apply(*impl.pool);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    SequenceSlot& s = slots[i];
    if (i < records.size()) {
      s.id = records[i].id;
      s.live = true;
      s.extents.assign(records[i].extents.begin(), records[i].extents.end());
      s.tail = records[i].tail;
    } else {
      s.live = false;
      s.extents.clear();
      s.tail = kNoBlock;
    }
  }
  impl.EndPass();
}

std::unique_ptr<SequenceSnapshot> CausalCache::SnapshotSequence(SequenceId seq,
                                                                Position len) const {
  constexpr const char* kFunction = "CausalCache::SnapshotSequence";
  const Impl& impl = *impl_;
  if (len < 0) throw Error(fmt::format("[{}] len {} is negative", kFunction, len));
  const SequenceSlot* slot = impl.table.Find(seq);
  if (slot == nullptr) {
    throw Error(fmt::format("[{}] sequence {} is unknown (it holds no tokens)", kFunction, seq));
  }
  ExtentList extents(slot->extents.begin(), slot->extents.end());
  detail::KeepBelow(extents, len);
  return std::make_unique<detail::CausalSequenceSnapshot>(impl.pool, std::move(extents));
}

void CausalCache::RestoreSequence(SequenceId dst, const SequenceSnapshot& snapshot) {
  constexpr const char* kFunction = "CausalCache::RestoreSequence";
  Impl& impl = *impl_;
  const auto* snap = dynamic_cast<const detail::CausalSequenceSnapshot*>(&snapshot);
  if (snap == nullptr) {
    throw SnapshotError(fmt::format("[{}] the snapshot was not made by a CausalCache", kFunction));
  }
  const detail::PoolLayout& mine = impl.Layout();
  const detail::PoolLayout& theirs = snap->Pool().Layout();
  if (!(mine == theirs)) {
    throw SnapshotError(fmt::format(
        "[{}] the snapshot holds {} layers x {} heads x head dims {}/{} {}/{} in blocks of {} "
        "tokens, the cache {} x {} x {}/{} {}/{} in blocks of {}",
        kFunction, theirs.layers, theirs.heads, theirs.key_dim, theirs.value_dim,
        DTypeName(theirs.key_dtype), DTypeName(theirs.value_dtype), theirs.block_tokens,
        mine.layers, mine.heads, mine.key_dim, mine.value_dim, DTypeName(mine.key_dtype),
        DTypeName(mine.value_dtype), mine.block_tokens));
  }
  SequenceSlot& to = impl.SlotFor(kFunction, dst);
  if (snap->SharedPool() == impl.pool) {
    to.extents.reserve(snap->Extents().size());
    to.tail = kNoBlock;
    impl.Assign(to, dst, snap->Extents());
    impl.EndPass();
    return;
  }
  // Another pool (another cache of the same layout): copy the tokens into blocks of this one.
  const std::int64_t t = mine.block_tokens;
  const std::int64_t needed = (snap->Tokens() + t - 1) / t;
  if (needed > impl.pool->Free()) {
    throw Error(fmt::format(
        "[{}] cache full: the snapshot's {} tokens need {} blocks, {} of the capacity of {} "
        "blocks are free",
        kFunction, snap->Tokens(), needed, impl.pool->Free(), impl.pool->Capacity()));
  }
  ExtentList copied;
  std::vector<BlockId> blocks;
  try {
    copied.reserve(snap->Extents().size() + static_cast<std::size_t>(needed));
    to.extents.reserve(snap->Extents().size() + static_cast<std::size_t>(needed));
    for (std::int64_t b = 0; b < needed; ++b) blocks.push_back(impl.pool->Take());
  } catch (...) {
    for (const BlockId b : blocks) impl.pool->Give(b);
    throw;
  }
  std::size_t next = 0;
  std::int32_t row = static_cast<std::int32_t>(t);
  for (const Extent& e : snap->Extents()) {
    std::int32_t done = 0;
    while (done < e.count) {
      if (row == t) {
        ++next;
        row = 0;
      }
      const BlockId block = blocks[next - 1];
      const auto n = static_cast<std::int32_t>(std::min<std::int64_t>(e.count - done, t - row));
      impl.pool->CopyRows(snap->Pool(), e.block, e.row + done, block, row, n);
      copied.push_back({block, row, n, e.pos + done});
      done += n;
      row += n;
    }
  }
  to.tail = kNoBlock;
  impl.Assign(to, dst, copied);
  impl.EndPass();
}

const CausalCacheOptions& CausalCache::Options() const noexcept { return impl_->options; }
std::int64_t CausalCache::CapacityBlocks() const noexcept { return impl_->pool->Capacity(); }
std::int64_t CausalCache::UsedBlocks() const noexcept { return impl_->pool->Used(); }
std::size_t CausalCache::BytesPerBlock() const noexcept { return impl_->Layout().BlockBytes(); }

std::vector<SequenceId> CausalCache::Sequences() const {
  std::vector<SequenceId> ids;
  for (const SequenceSlot& s : impl_->table.Slots()) {
    if (s.live) ids.push_back(s.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<Position> CausalCache::SequencePositions(SequenceId seq) const {
  std::vector<Position> positions;
  if (const SequenceSlot* slot = impl_->table.Find(seq)) {
    detail::AppendPositions(slot->extents, positions);
  }
  return positions;
}

}  // namespace ringkv
