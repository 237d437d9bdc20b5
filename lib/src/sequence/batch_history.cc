#include "ringkv/batch_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <gsl/assert>
#include <gsl/narrow>
#include <span>

#include "../cache/block_store.h"
#include "batch_plan.h"
#include "cache/stored_rows.h"
#include "ringkv/error.h"
#include "strided_copy.h"

namespace ringkv {

namespace detail {

const BatchPlan* BatchAccess::Current(const BatchHistory& history, const char* function) {
  const BatchPlan* plan = history.plan_.get();
  if (plan == nullptr) return nullptr;
  Expects(plan->epoch != nullptr);
  if (plan->epoch->generation != plan->generation) {
    throw Error(fmt::format(
        "[{}] the batch history is stale: its cache changed which tokens it holds (StartForward, "
        "CopyPrefix, Remove, RestoreState, ...) or was destroyed after the history was taken "
        "(generation {}, now {})",
        function, plan->generation, plan->epoch->generation));
  }
  return plan;
}

}  // namespace detail

namespace {

using detail::BatchAccess;
using detail::BatchPlan;

enum class Side : std::uint8_t { kKeys, kValues };

// Row r's group, or null when r belongs to none (it sees nothing).
const kernels::RaggedGroup* GroupOf(const BatchPlan& plan, std::int64_t row) {
  for (const kernels::RaggedGroup& g : plan.groups) {
    for (std::int64_t i = g.first_row; i < g.first_row + g.row_count; ++i) {
      if (plan.group_rows[gsl::narrow<std::size_t>(i)] == row) return &g;
    }
  }
  return nullptr;
}

// The contiguous [1, Hkv, n, dim] copy of the keys (or values) row `row` sees.
Tensor Visible(const BatchHistory& history, std::int64_t row, Side side, const char* function) {
  const BatchPlan* plan = BatchAccess::Current(history, function);
  const std::int64_t rows = plan == nullptr ? 0 : plan->rows;
  if (row < 0 || row >= rows) {
    throw Error(fmt::format("[{}] row {} is outside the history's {} rows [0, {})", function, row,
                            rows, rows));
  }
  const std::int64_t heads = plan->heads;
  const std::int64_t dim = side == Side::kKeys ? plan->key_dim : plan->value_dim;
  const DType dtype = side == Side::kKeys ? plan->key_dtype : plan->value_dtype;
  // Quantized rows are gathered as their carrier columns (bits), then dequantised.
  const DType element = detail::CarrierDtype(dtype);
  const std::int64_t columns = detail::CarrierColumns(dtype, dim);
  const auto units_per_element = static_cast<std::int64_t>(SizeOf(element) / SizeOf(dtype));
  const kernels::RaggedGroup* group = GroupOf(*plan, row);
  const std::size_t r = gsl::narrow<std::size_t>(row);
  const std::int64_t lo = group == nullptr ? 0 : plan->row_lo[r];
  const std::int64_t hi = group == nullptr ? 0 : std::max(lo, plan->row_hi[r]);
  Tensor out = Tensor::Zeros(element, {1, heads, hi - lo, columns});
  // A float side as stored; a quantized one's carrier rows dequantised.
  const auto as_read = [&](const Tensor& stored) {
    return IsQuantized(dtype) ? detail::LoadRows(stored, dtype, dim, kernels::BestKernels())
                              : stored;
  };
  if (hi == lo) return as_read(out);

  // The group's list: its prefix's runs, then its own.
  std::array<std::span<const kernels::RaggedRun>, 2> lists{};
  const std::span<const kernels::RaggedRun> all(plan->runs);
  if (group->prefix >= 0) {
    const kernels::RaggedPrefix& p = plan->prefixes[gsl::narrow<std::size_t>(group->prefix)];
    lists[0] =
        all.subspan(gsl::narrow<std::size_t>(p.first_run), gsl::narrow<std::size_t>(p.run_count));
  }
  lists[1] = all.subspan(gsl::narrow<std::size_t>(group->first_run),
                         gsl::narrow<std::size_t>(group->run_count));
  const std::ptrdiff_t byte_offset =
      side == Side::kKeys ? BatchAccess::KeyOffset(history) : BatchAccess::ValueOffset(history);
  std::int64_t first = 0;  // list index of the run's first key
  for (const std::span<const kernels::RaggedRun> list : lists) {
    for (const kernels::RaggedRun& run : list) {
      const std::int64_t begin = std::max(lo, first), end = std::min(hi, first + run.count);
      if (begin < end) {
        const void* base = side == Side::kKeys ? run.k : run.v;
        const std::array<std::int64_t, 4> strides{
            0, (side == Side::kKeys ? run.k_head_stride : run.v_head_stride) / units_per_element,
            (side == Side::kKeys ? run.k_row_stride : run.v_row_stride) / units_per_element, 1};
        const Tensor source =
            Tensor::Borrow(
                static_cast<const void*>(static_cast<const std::byte*>(base) + byte_offset),
                element, {1, heads, run.count, columns}, strides)
                .Slice(2, begin - first, end - first);
        Tensor dst = out.Slice(2, begin - lo, end - lo);
        detail::CopyElements(source, dst);
      }
      first += run.count;
    }
  }
  return as_read(out);
}

}  // namespace

std::int64_t BatchHistory::Rows() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::Rows");
  return plan == nullptr ? 0 : plan->rows;
}

DType BatchHistory::Dtype() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::Dtype");
  return plan == nullptr ? DType::kF32 : plan->key_dtype;
}

DType BatchHistory::KeyDtype() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::KeyDtype");
  return plan == nullptr ? DType::kF32 : plan->key_dtype;
}

DType BatchHistory::ValueDtype() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::ValueDtype");
  return plan == nullptr ? DType::kF32 : plan->value_dtype;
}

std::int64_t BatchHistory::Heads() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::Heads");
  return plan == nullptr ? 0 : plan->heads;
}

std::int64_t BatchHistory::KeyDim() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::KeyDim");
  return plan == nullptr ? 0 : plan->key_dim;
}

std::int64_t BatchHistory::ValueDim() const {
  const BatchPlan* plan = BatchAccess::Current(*this, "BatchHistory::ValueDim");
  return plan == nullptr ? 0 : plan->value_dim;
}

Tensor BatchHistory::VisibleKeys(std::int64_t row) const {
  return Visible(*this, row, Side::kKeys, "BatchHistory::VisibleKeys");
}

Tensor BatchHistory::VisibleValues(std::int64_t row) const {
  return Visible(*this, row, Side::kValues, "BatchHistory::VisibleValues");
}

}  // namespace ringkv
