#pragma once
// Turns one forward pass of a CausalCache into a BatchPlan: a group per
// sequence in the pass (its rows, in batch order), the sequence's extents as
// key runs in position order, each row's visible range [lo, hi) of that list,
// and shared prefixes: sequences whose lists start with the same runs (after
// CopyPrefix or RestoreSequence of one snapshot) name one RaggedPrefix, so
// attention reads those blocks once for all of them.
//
// Visibility of a stored position p to a row at position q (the reference's
// rules): p <= q (dropped for non-causal rows), p >= q - window (window > 0),
// p >= q - q % chunk (chunk > 0). Positions are sorted, so each rule cuts the
// list at one index.

#include <cstdint>
#include <span>
#include <vector>

#include "batch_plan.h"
#include "block_pool.h"
#include "extents.h"

namespace ringkv::detail {

struct PlanSequence {
  std::span<const Extent> extents;     // every token of the sequence, the pass's included
  std::span<const std::int64_t> rows;  // the pass's rows of this sequence, in batch order
};

struct Visibility {
  Position window = 0;  // 0: none
  Position chunk = 0;   // 0: none
};

// Each row's end of visible keys when causal and when not (SetNonCausalRows
// switches between them without rebuilding the plan).
struct RowEnds {
  std::vector<std::int64_t> causal;
  std::vector<std::int64_t> all;
};

class BatchPlanner {
 public:
  // Clears `plan` (keeping its capacity) and fills it for `positions` (one per
  // batch row). Every row belongs to exactly one sequence. Allocation-free once
  // the vectors have the capacity Reserve gives them.
  void Build(const BlockPool& pool, std::span<const PlanSequence> sequences,
             std::span<const Position> positions, Visibility rules, BatchPlan& plan, RowEnds& ends);
  // Capacity for a pass of `rows` rows in `groups` sequences, the longest
  // holding `longest` extents, all of them `extents` (Build emits at most
  // 2 * extents + groups runs).
  void Reserve(std::size_t groups, std::size_t longest, std::size_t extents, std::int64_t rows,
               BatchPlan& plan, RowEnds& ends);

 private:
  struct Shared {
    std::int64_t prefix = -1;    // index into plan.prefixes
    std::size_t own_extent = 0;  // first extent not (fully) in the prefix
    std::int32_t own_skip = 0;   // tokens of that extent inside the prefix
  };
  void FindPrefixes(const BlockPool& pool, std::span<const PlanSequence> sequences,
                    BatchPlan& plan);

  std::vector<std::size_t> order_;
  std::vector<Shared> shared_;
  std::vector<std::int64_t> cumulative_;
};

}  // namespace ringkv::detail
