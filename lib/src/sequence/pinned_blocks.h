#pragma once
// An owner outside the cache's sequence table (a sequence snapshot, a saved
// state): holds one reference on each distinct block of its extents for as
// long as it lives, and the pool itself, so it may outlive the cache.

#include <memory>
#include <span>
#include <vector>

#include "block_pool.h"
#include "block_refs.h"
#include "extents.h"

namespace ringkv::detail {

class PinnedBlocks {
 public:
  PinnedBlocks(std::shared_ptr<BlockPool> pool, std::span<const Extent> extents)
      : pool_(std::move(pool)) {
    DistinctBlocks(extents, blocks_);
    for (const BlockId b : blocks_) pool_->Retain(b);
  }
  ~PinnedBlocks() {
    for (const BlockId b : blocks_) pool_->Release(b);
  }
  PinnedBlocks(const PinnedBlocks&) = delete;
  PinnedBlocks& operator=(const PinnedBlocks&) = delete;

  const std::shared_ptr<BlockPool>& Pool() const noexcept { return pool_; }

 private:
  std::shared_ptr<BlockPool> pool_;
  std::vector<BlockId> blocks_;  // distinct
};

}  // namespace ringkv::detail
