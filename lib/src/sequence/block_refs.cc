#include "block_refs.h"

#include <algorithm>
#include <gsl/assert>

namespace ringkv::detail {

BlockRefDelta::BlockRefDelta(std::int64_t capacity_blocks)
    : seen_(static_cast<std::size_t>(capacity_blocks), 0),
      delta_(static_cast<std::size_t>(capacity_blocks), 0),
      listed_(static_cast<std::size_t>(capacity_blocks), false) {
  touched_.reserve(static_cast<std::size_t>(capacity_blocks));
}

void BlockRefDelta::Add(std::span<const Extent> extents, int sign) noexcept {
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0u);
    stamp_ = 1;
  }
  for (const Extent& e : extents) {
    const auto b = static_cast<std::size_t>(e.block);
    if (seen_[b] == stamp_) continue;
    seen_[b] = stamp_;
    if (!listed_[b]) {
      listed_[b] = true;
      touched_.push_back(e.block);
    }
    delta_[b] += sign;
  }
}

std::int64_t BlockRefDelta::WouldFree(const BlockPool& pool) const {
  std::int64_t freed = 0;
  for (const BlockId b : touched_) {
    const std::int32_t d = delta_[static_cast<std::size_t>(b)];
    if (d < 0 && pool.Refs(b) + d == 0) ++freed;
  }
  return freed;
}

void BlockRefDelta::Apply(BlockPool& pool) noexcept {
  for (const BlockId b : touched_) {
    for (std::int32_t d = delta_[static_cast<std::size_t>(b)]; d > 0; --d) pool.Retain(b);
  }
  for (const BlockId b : touched_) {
    for (std::int32_t d = delta_[static_cast<std::size_t>(b)]; d < 0; ++d) pool.Release(b);
  }
  Clear();
}

void BlockRefDelta::Clear() noexcept {
  for (const BlockId b : touched_) {
    delta_[static_cast<std::size_t>(b)] = 0;
    listed_[static_cast<std::size_t>(b)] = false;
  }
  touched_.clear();
}

void DistinctBlocks(std::span<const Extent> extents, std::vector<BlockId>& out) {
  const std::size_t first = out.size();
  for (const Extent& e : extents) out.push_back(e.block);
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  out.erase(std::unique(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()), out.end());
}

}  // namespace ringkv::detail
