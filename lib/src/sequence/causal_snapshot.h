#pragma once
// The SequenceSnapshot a CausalCache makes: one sequence's extents, sharing the
// pool's blocks (no K/V copy) and pinning them until it is destroyed.

#include <memory>
#include <vector>

#include "extents.h"
#include "pinned_blocks.h"
#include "ringkv/causal_cache.h"

namespace ringkv::detail {

class CausalSequenceSnapshot final : public SequenceSnapshot {
 public:
  // Extents sorted by position, as a sequence holds them.
  CausalSequenceSnapshot(std::shared_ptr<BlockPool> pool, ExtentList extents);

  std::int64_t Tokens() const noexcept override { return tokens_; }
  std::size_t Size() const noexcept override;
  std::vector<Position> Positions() const override;

  const ExtentList& Extents() const noexcept { return extents_; }
  const BlockPool& Pool() const noexcept { return *pins_.Pool(); }
  const std::shared_ptr<BlockPool>& SharedPool() const noexcept { return pins_.Pool(); }

 private:
  ExtentList extents_;
  std::int64_t tokens_ = 0;
  PinnedBlocks pins_;
};

}  // namespace ringkv::detail
