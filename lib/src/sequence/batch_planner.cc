#include "batch_planner.h"

#include <algorithm>
#include <gsl/assert>
#include <limits>
#include <tuple>

#include "cache/stored_rows.h"

namespace ringkv::detail {
namespace {

kernels::RaggedRun RunOf(const BlockPool& pool, BlockId block, std::int64_t row,
                         std::int64_t count) {
  const PoolLayout& layout = pool.Layout();
  const std::byte* data = pool.Data(block);
  const auto r = static_cast<std::size_t>(row);
  kernels::RaggedRun run;
  run.k = data + r * StoredRowBytes(layout.key_dtype, layout.key_dim);
  run.v = data + layout.KeyBytes() + r * StoredRowBytes(layout.value_dtype, layout.value_dim);
  run.count = count;
  run.k_head_stride = layout.block_tokens * layout.KeyRowStride();
  run.k_row_stride = layout.KeyRowStride();
  run.v_head_stride = layout.block_tokens * layout.ValueRowStride();
  run.v_row_stride = layout.ValueRowStride();
  return run;
}

// Tokens of `extents` at positions < x; cumulative[i] = tokens of extents [0, i).
std::int64_t CountBelow(std::span<const Extent> extents, std::span<const std::int64_t> cumulative,
                        std::int64_t x) noexcept {
  const auto it = std::partition_point(extents.begin(), extents.end(),
                                       [x](const Extent& e) { return std::int64_t{e.End()} <= x; });
  const auto index = static_cast<std::size_t>(it - extents.begin());
  std::int64_t count = cumulative[index];
  if (it != extents.end() && it->pos < x) count += x - it->pos;
  return count;
}

}  // namespace

void BatchPlanner::Reserve(std::size_t groups, std::size_t longest, std::size_t extents,
                           std::int64_t rows, BatchPlan& plan, RowEnds& ends) {
  const auto n = static_cast<std::size_t>(rows);
  plan.runs.reserve(2 * extents + groups);
  plan.prefixes.reserve(groups);
  plan.groups.reserve(groups);
  plan.group_rows.reserve(n);
  plan.row_lo.reserve(n);
  plan.row_hi.reserve(n);
  ends.causal.reserve(n);
  ends.all.reserve(n);
  order_.reserve(groups);
  shared_.reserve(groups);
  cumulative_.reserve(longest + 1);
}

void BatchPlanner::FindPrefixes(const BlockPool& pool, std::span<const PlanSequence> sequences,
                                BatchPlan& plan) {
  shared_.assign(sequences.size(), Shared{});
  order_.clear();
  for (std::size_t g = 0; g < sequences.size(); ++g) {
    if (!sequences[g].extents.empty()) order_.push_back(g);
  }
  const auto first_key = [&](std::size_t g) {
    const Extent& e = sequences[g].extents.front();
    return std::tuple(e.block, e.row, e.pos);
  };
  std::sort(order_.begin(), order_.end(),
            [&](std::size_t a, std::size_t b) { return first_key(a) < first_key(b); });
  for (std::size_t begin = 0; begin < order_.size();) {
    std::size_t end = begin + 1;
    while (end < order_.size() && first_key(order_[end]) == first_key(order_[begin])) ++end;
    if (end - begin < 2) {
      begin = end;
      continue;
    }
    // The longest run of extents every member starts with; the last one may be
    // shared only in part (one member wrote further into that block).
    const std::span<const std::size_t> members(order_.data() + begin, end - begin);
    const std::span<const Extent> lead = sequences[members.front()].extents;
    std::size_t whole = 0;
    std::int32_t partial = 0;
    for (; whole < lead.size(); ++whole) {
      const Extent& e = lead[whole];
      std::int32_t common = e.count;
      bool same_start = true;
      for (const std::size_t m : members) {
        const std::span<const Extent> x = sequences[m].extents;
        if (whole >= x.size() || x[whole].block != e.block || x[whole].row != e.row ||
            x[whole].pos != e.pos) {
          same_start = false;
          break;
        }
        common = std::min(common, x[whole].count);
      }
      if (!same_start) break;
      if (common < e.count || std::any_of(members.begin(), members.end(), [&](std::size_t m) {
            return sequences[m].extents[whole].count != common;
          })) {
        partial = common;
        break;
      }
    }
    const auto first_run = static_cast<std::int64_t>(plan.runs.size());
    for (std::size_t i = 0; i < whole; ++i) {
      plan.runs.push_back(RunOf(pool, lead[i].block, lead[i].row, lead[i].count));
    }
    if (partial > 0) plan.runs.push_back(RunOf(pool, lead[whole].block, lead[whole].row, partial));
    const auto prefix = static_cast<std::int64_t>(plan.prefixes.size());
    plan.prefixes.push_back({first_run, static_cast<std::int64_t>(plan.runs.size()) - first_run});
    for (const std::size_t m : members) shared_[m] = Shared{prefix, whole, partial};
    begin = end;
  }
}

void BatchPlanner::Build(const BlockPool& pool, std::span<const PlanSequence> sequences,
                         std::span<const Position> positions, Visibility rules, BatchPlan& plan,
                         RowEnds& ends) {
  const PoolLayout& layout = pool.Layout();
  const auto n = static_cast<std::int64_t>(positions.size());
  plan.key_dtype = layout.key_dtype;
  plan.value_dtype = layout.value_dtype;
  plan.rows = n;
  plan.heads = layout.heads;
  plan.key_dim = layout.key_dim;
  plan.value_dim = layout.value_dim;
  plan.runs.clear();
  plan.prefixes.clear();
  plan.groups.clear();
  plan.group_rows.clear();
  plan.row_lo.assign(static_cast<std::size_t>(n), 0);
  plan.row_hi.assign(static_cast<std::size_t>(n), 0);
  ends.causal.assign(static_cast<std::size_t>(n), 0);
  ends.all.assign(static_cast<std::size_t>(n), 0);

  FindPrefixes(pool, sequences, plan);
  for (std::size_t g = 0; g < sequences.size(); ++g) {
    const PlanSequence& s = sequences[g];
    const Shared& shared = shared_[g];
    kernels::RaggedGroup group;
    group.first_row = static_cast<std::int64_t>(plan.group_rows.size());
    group.row_count = static_cast<std::int64_t>(s.rows.size());
    group.prefix = shared.prefix;
    group.first_run = static_cast<std::int64_t>(plan.runs.size());
    for (std::size_t i = shared.own_extent; i < s.extents.size(); ++i) {
      const Extent& e = s.extents[i];
      const std::int32_t skip = i == shared.own_extent ? shared.own_skip : 0;
      if (skip < e.count) plan.runs.push_back(RunOf(pool, e.block, e.row + skip, e.count - skip));
    }
    group.run_count = static_cast<std::int64_t>(plan.runs.size()) - group.first_run;
    plan.groups.push_back(group);

    cumulative_.assign(1, 0);
    for (const Extent& e : s.extents) cumulative_.push_back(cumulative_.back() + e.count);
    const std::int64_t total = cumulative_.back();
    for (const std::int64_t r : s.rows) {
      plan.group_rows.push_back(r);
      const std::int64_t q = positions[static_cast<std::size_t>(r)];
      std::int64_t lower = std::numeric_limits<std::int64_t>::min();
      if (rules.window > 0) lower = q - rules.window;
      if (rules.chunk > 0) lower = std::max(lower, q - q % rules.chunk);
      const auto i = static_cast<std::size_t>(r);
      plan.row_lo[i] = CountBelow(s.extents, cumulative_, lower);
      ends.causal[i] = CountBelow(s.extents, cumulative_, q + 1);
      ends.all[i] = total;
      plan.row_hi[i] = ends.causal[i];
    }
  }
}

}  // namespace ringkv::detail
