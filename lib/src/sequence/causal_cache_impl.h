#pragma once
// The inside of a CausalCache, shared by its translation units: the forward
// pass (forward_pass.cc), Remove (remove_shift.cc) and the rest
// (causal_cache.cc). Private to lib/.

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <memory>
#include <optional>
#include <vector>

#include "batch_plan.h"
#include "batch_planner.h"
#include "block_pool.h"
#include "block_refs.h"
#include "cache/block_store.h"
#include "causal_options.h"
#include "causal_snapshot.h"
#include "causal_state.h"
#include "extents.h"
#include "ringkv/causal_cache.h"
#include "ringkv/error.h"
#include "sequence_table.h"

namespace ringkv {

using detail::BlockId;
using detail::Extent;
using detail::ExtentList;
using detail::kNoBlock;
using detail::SequenceSlot;

namespace detail {

// Named in the messages of everything StartForward checks (causal_cache.cc, forward_pass.cc).
inline constexpr const char* kStartForward = "CausalCache::StartForward";

// Consecutive batch rows stored in consecutive rows of one block: one copy per layer.
struct WriteRun {
  std::int64_t first_row = 0;  // batch row
  std::int64_t count = 0;
  BlockId block = kNoBlock;
  std::int32_t block_row = 0;
};

// One sequence of the pass being started.
struct PassSequence {
  SequenceId id = 0;
  SequenceSlot* slot = nullptr;  // null: a new sequence
  std::size_t first = 0;         // its entries in the sorted order
  std::size_t end = 0;
  BlockId tail = kNoBlock;  // where its first tokens continue in place
  std::int32_t tail_row = 0;
  std::int32_t in_place = 0;  // tokens that go there
};

enum class PassKind : std::uint8_t { kNone, kStore, kReserve };

}  // namespace detail

struct CausalCache::Impl {
  using PassKind = detail::PassKind;
  using PassSequence = detail::PassSequence;
  using WriteRun = detail::WriteRun;

  explicit Impl(detail::ResolvedCausalOptions resolved)
      : options(std::move(resolved.options)),
        pool(std::make_shared<detail::BlockPool>(resolved.layout, resolved.capacity_blocks)),
        table(options.max_sequences),
        delta(resolved.capacity_blocks),
        epoch(std::make_shared<detail::ViewEpoch>()),
        plan(std::make_shared<detail::BatchPlan>()) {
    const auto max_batch = static_cast<std::size_t>(options.max_batch);
    const std::size_t groups = std::min(max_batch, static_cast<std::size_t>(options.max_sequences));
    order.reserve(max_batch);
    positions.reserve(max_batch);
    writes.reserve(max_batch);
    write_block.reserve(max_batch);
    write_row.reserve(max_batch);
    rows_by_group.reserve(max_batch);
    pass_sequences.reserve(groups);
    plan_sequences.reserve(groups);
    taken.reserve(static_cast<std::size_t>(resolved.capacity_blocks));
    claims.reserve(groups);
  }

  ~Impl() {
    InvalidateHistories();
    for (SequenceSlot& s : table.Slots()) {
      if (s.live) delta.Add(s.extents, -1);
    }
    delta.Apply(*pool);  // snapshots and states may keep the pool alive
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void InvalidateHistories() noexcept { ++epoch->generation; }
  // Every change of which tokens the cache holds ends the pass: its write
  // targets and plan describe the old state.
  void EndPass() noexcept {
    pass = PassKind::kNone;
    InvalidateHistories();
  }

  const detail::PoolLayout& Layout() const noexcept { return pool->Layout(); }
  bool Windowed() const noexcept { return options.window > 0; }

  void CheckLayer(const char* function, int layer) const {
    if (layer < 0 || layer >= options.layers) {
      throw Error(fmt::format("[{}] layer {} is outside [0, {})", function, layer, options.layers));
    }
  }
  void CheckPass(const char* function) const {
    if (pass == PassKind::kNone) {
      throw Error(fmt::format(
          "[{}] no forward pass is in progress (call StartForward first; CopyPrefix, Remove, "
          "RestoreState and RestoreSequence end a pass)",
          function));
    }
  }
  SequenceSlot& Known(const char* function, SequenceId seq) {
    SequenceSlot* slot = table.Find(seq);
    if (slot == nullptr) {
      throw Error(fmt::format("[{}] sequence {} is unknown (it holds no tokens)", function, seq));
    }
    return *slot;
  }
  // The live slot of seq, or a vacant one for it; throws when max_sequences are live.
  SequenceSlot& SlotFor(const char* function, SequenceId seq) {
    if (SequenceSlot* slot = table.Find(seq)) return *slot;
    if (SequenceSlot* slot = table.Vacant()) return *slot;
    throw Error(fmt::format("[{}] sequence {} would be one more than options.max_sequences {}",
                            function, seq, options.max_sequences));
  }

  // Makes `slot` (live or vacant) hold exactly `extents` (already reserved for),
  // moving block references; cannot fail.
  void Assign(SequenceSlot& slot, SequenceId id, const ExtentList& extents) noexcept {
    delta.Add(extents, +1);
    if (slot.live) delta.Add(slot.extents, -1);
    delta.Apply(*pool);
    slot.extents.assign(extents.begin(), extents.end());  // capacity reserved by the caller
    slot.id = id;
    slot.live = !extents.empty();
    if (!slot.live) {
      slot.tail = kNoBlock;
    } else if (slot.tail == kNoBlock || !detail::UsesBlock(slot.extents, slot.tail)) {
      slot.tail = slot.extents.back().block;
    }
  }

  void StartStore(const Batch& batch);
  void StartReserve(const Batch& batch);
  void ValidateBatch(const char* function, const Batch& batch) const;
  std::int64_t PlanRetention();
  std::int64_t PlanPlacement();
  void Commit(std::int64_t new_blocks);
  BatchHistory History(int layer) const {
    const auto offset =
        static_cast<std::ptrdiff_t>(Layout().LayerBytes()) * static_cast<std::ptrdiff_t>(layer);
    return detail::BatchAccess::Make(plan, offset, offset);
  }
  std::shared_ptr<detail::BatchPlan>& WritablePlan() {
    // A plan that histories still hold stays as they saw it.
    if (plan.use_count() > 1) plan = std::make_shared<detail::BatchPlan>(*plan);
    return plan;
  }
  void Truncate(SequenceSlot& slot, Position begin);
  void RemoveAndShift(const char* function, SequenceSlot& slot, Position begin, Position end);

  CausalCacheOptions options;
  std::shared_ptr<detail::BlockPool> pool;
  detail::SequenceTable table;
  detail::BlockRefDelta delta;
  detail::BatchPlanner planner;
  std::shared_ptr<detail::ViewEpoch> epoch;

  // The pass in progress.
  PassKind pass = PassKind::kNone;
  std::int64_t pass_rows = 0;
  std::vector<Position> positions;  // [N]
  std::vector<WriteRun> writes;
  std::shared_ptr<detail::BatchPlan> plan;
  detail::RowEnds ends;

  // Scratch of StartForward (capacity reserved at construction).
  std::vector<std::int64_t> order;  // batch rows sorted by (sequence, position)
  std::vector<PassSequence> pass_sequences;
  std::vector<std::optional<Position>> cuts;             // per slot
  std::vector<std::pair<BlockId, std::int32_t>> claims;  // in-place appends: block, new high water
  std::vector<BlockId> taken;
  std::vector<BlockId> write_block;  // [N]
  std::vector<std::int32_t> write_row;
  std::vector<std::int64_t> rows_by_group;
  std::vector<detail::PlanSequence> plan_sequences;
  ExtentList scratch;
};

}  // namespace ringkv
