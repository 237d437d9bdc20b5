// The pooled prompt cache's and the sequence file's view of a CausalCache
// snapshot: its extents in its pool (lib/src/sequence/causal_snapshot.h).
#include "sequence_snapshot_access.h"

#include <algorithm>
#include <cstring>
#include <gsl/assert>

#include "../sequence/block_refs.h"
#include "../sequence/causal_options.h"
#include "../sequence/causal_snapshot.h"
#include "cache/stored_rows.h"
#include "ringkv/tensor_ops.h"

namespace ringkv::detail {
namespace {

const CausalSequenceSnapshot& Concrete(const SequenceSnapshot& snapshot) {
  const auto* concrete = dynamic_cast<const CausalSequenceSnapshot*>(&snapshot);
  Expects(concrete != nullptr);  // CausalCache makes every SequenceSnapshot
  return *concrete;
}

template <class View>
Tensor Gather(const SequenceSnapshot& snapshot, int layer, std::int64_t columns, View view) {
  const CausalSequenceSnapshot& s = Concrete(snapshot);
  const PoolLayout& layout = s.Pool().Layout();
  Expects(layer >= 0 && layer < layout.layers);
  Tensor out = Tensor::Uninitialized(layout.Element(), {1, layout.heads, s.Tokens(), columns});
  std::int64_t at = 0;
  for (const Extent& e : s.Extents()) {
    SliceUpdate(out, view(s.Pool(), e), 2, at);
    at += e.count;
  }
  return out;
}

}  // namespace

void ForEachSequenceBlock(const SequenceSnapshot& snapshot,
                          const std::function<void(const void*, std::size_t)>& fn) {
  const CausalSequenceSnapshot& s = Concrete(snapshot);
  std::vector<BlockId> blocks;
  DistinctBlocks(s.Extents(), blocks);
  const std::size_t bytes = s.Pool().Layout().BlockBytes();
  // A block's memory address names it across every pool of the process.
  for (const BlockId block : blocks) fn(s.Pool().Data(block), bytes);
}

Tensor SequenceKeys(const SequenceSnapshot& snapshot, int layer) {
  const std::int64_t columns = Concrete(snapshot).Pool().Layout().KeyColumns();
  return Gather(snapshot, layer, columns, [layer](const BlockPool& pool, const Extent& e) {
    return pool.Keys(e.block, layer, e.row, e.count);
  });
}

Tensor SequenceValues(const SequenceSnapshot& snapshot, int layer) {
  const std::int64_t columns = Concrete(snapshot).Pool().Layout().ValueColumns();
  return Gather(snapshot, layer, columns, [layer](const BlockPool& pool, const Extent& e) {
    return pool.Values(e.block, layer, e.row, e.count);
  });
}

std::vector<std::byte> PackedSequenceRows(const SequenceSnapshot& snapshot, int layer, bool keys) {
  const PoolLayout& layout = Concrete(snapshot).Pool().Layout();
  const DType dtype = keys ? layout.key_dtype : layout.value_dtype;
  const std::int64_t dim = keys ? layout.key_dim : layout.value_dim;
  Expects(IsQuantized(dtype));
  const Tensor carrier = keys ? SequenceKeys(snapshot, layer) : SequenceValues(snapshot, layer);
  const std::size_t packed = RowBytes(dtype, dim);
  const std::size_t stored = StoredRowBytes(dtype, dim);
  const auto rows = static_cast<std::size_t>(carrier.Dim(1) * carrier.Dim(2));
  std::vector<std::byte> out(rows * packed);
  const auto* from = static_cast<const std::byte*>(carrier.Data());  // contiguous
  for (std::size_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * packed, from + r * stored, packed);
  }
  return out;
}

std::unique_ptr<SequenceSnapshot> SequenceFromRows(const CausalCacheOptions& options,
                                                   std::span<const Position> positions,
                                                   std::span<const std::vector<std::byte>> keys,
                                                   std::span<const std::vector<std::byte>> values) {
  const PoolLayout layout = PoolLayoutOf(options);
  Expects(IsQuantized(layout.key_dtype) && !positions.empty());
  Expects(keys.size() == static_cast<std::size_t>(layout.layers) && values.size() == keys.size());
  const auto n = static_cast<std::int64_t>(positions.size());
  const std::int64_t t = layout.block_tokens;
  auto pool = std::make_shared<BlockPool>(layout, (n + t - 1) / t);
  // Packed row (h, i) of a side goes to row i % t of block i / t, padding zeroed.
  const auto fill = [&](Tensor side, const std::vector<std::byte>& src, DType dtype,
                        std::int64_t dim, std::int64_t first) {
    const std::size_t packed = RowBytes(dtype, dim);
    const std::size_t stored = StoredRowBytes(dtype, dim);
    Expects(src.size() == static_cast<std::size_t>(layout.heads * n) * packed);
    auto* base = static_cast<std::byte*>(side.MutableData());
    for (std::int64_t h = 0; h < layout.heads; ++h) {
      for (std::int64_t r = 0; r < side.Dim(2); ++r) {
        std::byte* dst = base + static_cast<std::size_t>(h * side.Stride(1) + r * side.Stride(2)) *
                                    SizeOf(side.Dtype());
        std::memcpy(dst, src.data() + static_cast<std::size_t>(h * n + first + r) * packed, packed);
        std::memset(dst + packed, 0, stored - packed);
      }
    }
  };
  ExtentList extents;
  for (std::int64_t first = 0; first < n; first += t) {
    const std::int64_t count = std::min(t, n - first);
    const BlockId block = pool->Take();
    for (int l = 0; l < layout.layers; ++l) {
      const auto i = static_cast<std::size_t>(l);
      fill(pool->Keys(block, l, 0, count), keys[i], layout.key_dtype, layout.key_dim, first);
      fill(pool->Values(block, l, 0, count), values[i], layout.value_dtype, layout.value_dim,
           first);
    }
    pool->RaiseHighWater(block, static_cast<std::int32_t>(count));
    for (std::int64_t r = 0; r < count; ++r) {
      const Position pos = positions[static_cast<std::size_t>(first + r)];
      if (r > 0 && extents.back().End() == pos) {
        ++extents.back().count;
      } else {
        extents.push_back({block, static_cast<std::int32_t>(r), 1, pos});
      }
    }
  }
  return std::make_unique<CausalSequenceSnapshot>(std::move(pool), std::move(extents));
}

}  // namespace ringkv::detail
