#include "causal_snapshot.h"

namespace ringkv::detail {

CausalSequenceSnapshot::CausalSequenceSnapshot(std::shared_ptr<BlockPool> pool, ExtentList extents)
    : extents_(std::move(extents)),
      tokens_(TokenCount(extents_)),
      pins_(std::move(pool), extents_) {}

std::size_t CausalSequenceSnapshot::Size() const noexcept {
  return static_cast<std::size_t>(tokens_) * pins_.Pool()->Layout().TokenBytes();
}

std::vector<Position> CausalSequenceSnapshot::Positions() const {
  std::vector<Position> positions;
  positions.reserve(static_cast<std::size_t>(tokens_));
  AppendPositions(extents_, positions);
  return positions;
}

}  // namespace ringkv::detail
