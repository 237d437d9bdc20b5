// CausalCache's forward pass: validating a batch, sliding-window retention,
// placing the new tokens (in place after a sequence's tail or in new blocks),
// and the commit that builds the pass's BatchPlan. Everything that can fail
// happens before the commit, which cannot.
#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>

#include "causal_cache_impl.h"
#include "ringkv/error.h"
#include "sliding_window.h"

namespace ringkv {

void CausalCache::Impl::ValidateBatch(const char* function, const Batch& batch) const {
  if (batch.positions.size() != batch.sequences.size()) {
    throw Error(fmt::format("[{}] batch.positions has {} entries but batch.sequences {}", function,
                            batch.positions.size(), batch.sequences.size()));
  }
  const auto n = static_cast<std::int64_t>(batch.positions.size());
  if (n == 0) throw Error(fmt::format("[{}] the batch has no tokens", function));
  if (n > options.max_batch) {
    throw Error(fmt::format("[{}] the batch has {} tokens, more than options.max_batch {}",
                            function, n, options.max_batch));
  }
  for (std::size_t i = 0; i < batch.positions.size(); ++i) {
    const Position p = batch.positions[i];
    if (p < 0 || p == kEndOfSequence) {
      throw Error(fmt::format("[{}] batch position {} (row {}) is outside [0, {})", function, p, i,
                              kEndOfSequence));
    }
  }
}

void CausalCache::Impl::StartReserve(const Batch& batch) {
  ValidateBatch(detail::kStartForward, batch);
  const auto n = static_cast<std::int64_t>(batch.positions.size());
  pool->AllocateAll();
  std::shared_ptr<detail::BatchPlan>& p = WritablePlan();
  p->runs.reserve(static_cast<std::size_t>(n));
  p->row_lo.assign(static_cast<std::size_t>(n), 0);
  p->row_hi.assign(static_cast<std::size_t>(n), 0);
  ends.causal.assign(static_cast<std::size_t>(n), 0);
  ends.all.assign(static_cast<std::size_t>(n), 0);
  // No metadata changes: the pass sees nothing and stores nothing.
  p->key_dtype = Layout().key_dtype;
  p->value_dtype = Layout().value_dtype;
  p->rows = n;
  p->heads = Layout().heads;
  p->key_dim = Layout().key_dim;
  p->value_dim = Layout().value_dim;
  p->runs.clear();
  p->prefixes.clear();
  p->groups.clear();
  p->group_rows.clear();
  p->epoch = epoch;
  p->generation = epoch->generation;
  writes.clear();
  pass = PassKind::kReserve;
  pass_rows = n;
}

// Which tokens retention releases (cuts, per slot) and how many blocks that
// frees; the reference change is left pending in `delta` for Commit.
std::int64_t CausalCache::Impl::PlanRetention() {
  std::vector<SequenceSlot>& slots = table.Slots();
  cuts.assign(slots.size(), std::nullopt);
  if (!Windowed()) return 0;
  for (std::size_t s = 0; s < slots.size(); ++s) {
    SequenceSlot& slot = slots[s];
    if (!slot.live) continue;
    std::optional<Position> lowest;
    for (const PassSequence& ps : pass_sequences) {
      if (ps.slot == &slot) lowest = positions[static_cast<std::size_t>(order[ps.first])];
    }
    cuts[s] = detail::RetentionCut(slot.extents, lowest, options.memory);
    if (!cuts[s].has_value()) continue;
    const Position cut = *cuts[s];
    const auto kept = std::partition_point(slot.extents.begin(), slot.extents.end(),
                                           [cut](const Extent& e) { return e.End() <= cut; });
    delta.Add(std::span<const Extent>(kept, slot.extents.end()), +1);
    delta.Add(slot.extents, -1);
  }
  return delta.WouldFree(*pool);
}

// Where each pass sequence's tokens go: first in place after its tail (when no
// other owner can see those rows), the rest in new blocks. Returns the new blocks.
std::int64_t CausalCache::Impl::PlanPlacement() {
  const std::int64_t t = Layout().block_tokens;
  std::int64_t new_blocks = 0;
  claims.clear();
  std::vector<SequenceSlot>& slots = table.Slots();
  for (PassSequence& ps : pass_sequences) {
    const auto count = static_cast<std::int64_t>(ps.end - ps.first);
    ps.tail = kNoBlock;
    ps.in_place = 0;
    if (ps.slot != nullptr && ps.slot->tail != kNoBlock) {
      const auto s = static_cast<std::size_t>(ps.slot - slots.data());
      std::span<const Extent> kept = ps.slot->extents;
      if (cuts[s].has_value()) {
        const Position cut = *cuts[s];
        kept = std::span<const Extent>(
            std::partition_point(kept.begin(), kept.end(),
                                 [cut](const Extent& e) { return e.End() <= cut; }),
            kept.end());
      }
      const BlockId b = ps.slot->tail;
      const std::int32_t row = detail::RowsUsedIn(kept, b);
      std::int32_t high = pool->HighWater(b);
      for (const auto& [block, claimed] : claims) {
        if (block == b) high = std::max(high, claimed);
      }
      // Rows at or past the high water were never handed out; a block this
      // sequence alone references has no reader of its rows past `row` either.
      if (row > 0 && row < t && (row >= high || pool->Refs(b) == 1)) {
        ps.tail = b;
        ps.tail_row = row;
        ps.in_place = static_cast<std::int32_t>(std::min<std::int64_t>(count, t - row));
        claims.emplace_back(b, row + ps.in_place);
      }
    }
    new_blocks += (count - ps.in_place + t - 1) / t;
  }
  return new_blocks;
}

void CausalCache::Impl::StartStore(const Batch& batch) {
  ValidateBatch(detail::kStartForward, batch);
  const std::size_t n = batch.positions.size();

  // Group the rows by sequence, in position order (scratch only so far).
  order.resize(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int64_t>(i);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    return std::pair(batch.sequences[ia], batch.positions[ia]) <
           std::pair(batch.sequences[ib], batch.positions[ib]);
  });
  pass_sequences.clear();
  std::size_t new_sequences = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const auto row = static_cast<std::size_t>(order[k]);
    const SequenceId seq = batch.sequences[row];
    const Position pos = batch.positions[row];
    if (k > 0) {
      const auto prev = static_cast<std::size_t>(order[k - 1]);
      if (batch.sequences[prev] == seq && batch.positions[prev] == pos) {
        throw Error(fmt::format("[{}] batch rows {} and {} both hold position {} of sequence {}",
                                detail::kStartForward, std::min(prev, row), std::max(prev, row),
                                pos, seq));
      }
    }
    if (pass_sequences.empty() || pass_sequences.back().id != seq) {
      PassSequence ps;
      ps.id = seq;
      ps.slot = table.Find(seq);
      ps.first = k;
      if (ps.slot == nullptr) ++new_sequences;
      pass_sequences.push_back(ps);
    }
    pass_sequences.back().end = k + 1;
    const SequenceSlot* slot = pass_sequences.back().slot;
    if (slot != nullptr && detail::ContainsPosition(slot->extents, pos)) {
      throw Error(fmt::format("[{}] position {} of sequence {} (batch row {}) is already stored",
                              detail::kStartForward, pos, seq, row));
    }
  }
  if (table.LiveCount() + static_cast<std::int64_t>(new_sequences) > options.max_sequences) {
    throw Error(fmt::format(
        "[{}] the batch adds {} new sequences to the {} held, more than options.max_sequences {}",
        detail::kStartForward, new_sequences, table.LiveCount(), options.max_sequences));
  }
  positions.assign(batch.positions.begin(), batch.positions.end());

  const std::int64_t freed = PlanRetention();
  const std::int64_t new_blocks = PlanPlacement();
  const std::int64_t free_now = pool->Free();
  if (new_blocks > free_now + freed) {
    delta.Clear();
    throw Error(fmt::format(
        "[{}] cache full: the batch of {} tokens needs {} new blocks of {} tokens, {} of the "
        "capacity of {} blocks ({} tokens) are free",
        detail::kStartForward, n, new_blocks, Layout().block_tokens, free_now + freed,
        pool->Capacity(), pool->Capacity() * Layout().block_tokens));
  }

  // Everything that may allocate, before any change.
  taken.clear();
  try {
    const std::int64_t now = std::min(new_blocks, free_now);
    for (std::int64_t b = 0; b < now; ++b) taken.push_back(pool->Take());
    std::size_t vacant = 0;
    for (PassSequence& ps : pass_sequences) {
      const std::size_t more = ps.end - ps.first;
      if (ps.slot == nullptr) {
        ps.slot = table.Vacant(vacant++);
        Expects(ps.slot != nullptr);
        ps.slot->extents.clear();
      }
      ps.slot->extents.reserve(ps.slot->extents.size() + more + 1);
    }
    write_block.resize(n);
    write_row.resize(n);
    rows_by_group.resize(n);
    std::size_t longest = 0;
    std::size_t extents = 0;
    for (const PassSequence& ps : pass_sequences) {
      const std::size_t size = ps.slot->extents.size() + (ps.end - ps.first);
      longest = std::max(longest, size);
      extents += size;
    }
    planner.Reserve(pass_sequences.size(), longest, extents, static_cast<std::int64_t>(n),
                    *WritablePlan(), ends);
  } catch (...) {
    for (const BlockId b : taken) pool->Give(b);
    taken.clear();
    delta.Clear();
    for (PassSequence& ps : pass_sequences) {
      // Vacant slots picked above stay vacant (live is still false).
      if (ps.slot != nullptr && !ps.slot->live) ps.slot = nullptr;
    }
    throw;
  }
  Commit(new_blocks);
}

// From here on nothing can fail: every vector has its capacity and every block is in hand.
void CausalCache::Impl::Commit(std::int64_t new_blocks) {
  const std::int64_t t = Layout().block_tokens;
  std::vector<SequenceSlot>& slots = table.Slots();

  // Retention: release what the window no longer needs.
  for (std::size_t s = 0; s < slots.size(); ++s) {
    if (!cuts[s].has_value()) continue;
    SequenceSlot& slot = slots[s];
    detail::DropBelow(slot.extents, *cuts[s]);
    if (slot.tail != kNoBlock && !detail::UsesBlock(slot.extents, slot.tail)) slot.tail = kNoBlock;
  }
  delta.Apply(*pool);
  // The rest of the new blocks come from what retention just freed (memory already allocated).
  while (static_cast<std::int64_t>(taken.size()) < new_blocks) taken.push_back(pool->Take());

  // Placement, in position order per sequence.
  std::size_t next_taken = 0;
  for (PassSequence& ps : pass_sequences) {
    SequenceSlot& slot = *ps.slot;
    if (!slot.live) {
      slot.id = ps.id;
      slot.live = true;
      slot.tail = kNoBlock;
    }
    BlockId block = ps.tail;
    std::int32_t row = ps.tail_row;
    std::int32_t room = ps.in_place;
    for (std::size_t k = ps.first; k < ps.end; ++k) {
      if (room == 0) {
        block = taken[next_taken++];
        pool->Retain(block);
        row = 0;
        room = static_cast<std::int32_t>(t);
      }
      const auto r = static_cast<std::size_t>(order[k]);
      detail::InsertToken(slot.extents, block, row, positions[r]);
      write_block[r] = block;
      write_row[r] = row;
      ++row;
      --room;
      pool->RaiseHighWater(block, row);
    }
    slot.tail = block;
  }
  Expects(next_taken == taken.size());
  taken.clear();

  writes.clear();
  for (std::size_t r = 0; r < positions.size(); ++r) {
    if (!writes.empty()) {
      WriteRun& last = writes.back();
      if (last.block == write_block[r] && last.block_row + last.count == write_row[r]) {
        ++last.count;
        continue;
      }
    }
    writes.push_back({static_cast<std::int64_t>(r), 1, write_block[r], write_row[r]});
  }

  // The plan: one group per sequence, its rows in batch order.
  plan_sequences.clear();
  std::size_t used = 0;
  for (const PassSequence& ps : pass_sequences) {
    const std::size_t count = ps.end - ps.first;
    std::copy(order.begin() + static_cast<std::ptrdiff_t>(ps.first),
              order.begin() + static_cast<std::ptrdiff_t>(ps.end),
              rows_by_group.begin() + static_cast<std::ptrdiff_t>(used));
    std::sort(rows_by_group.begin() + static_cast<std::ptrdiff_t>(used),
              rows_by_group.begin() + static_cast<std::ptrdiff_t>(used + count));
    plan_sequences.push_back(
        {ps.slot->extents, std::span<const std::int64_t>(rows_by_group.data() + used, count)});
    used += count;
  }
  InvalidateHistories();
  planner.Build(*pool, plan_sequences, positions, {options.window, options.chunk}, *plan, ends);
  plan->epoch = epoch;
  plan->generation = epoch->generation;
  pass = PassKind::kStore;
  pass_rows = static_cast<std::int64_t>(positions.size());
}

}  // namespace ringkv
