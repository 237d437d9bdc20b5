// The pooled prompt cache's and the sequence file's view of a CausalCache
// snapshot: its extents in its pool (lib/src/sequence/causal_snapshot.h).
#include "sequence_snapshot_access.h"

#include <gsl/assert>

#include "../sequence/block_refs.h"
#include "../sequence/causal_snapshot.h"
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

}  // namespace ringkv::detail
