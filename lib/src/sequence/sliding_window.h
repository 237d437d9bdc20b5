#pragma once
// Sliding-window retention and resumption, the reference's rules
// (updateSlidingWindow and CanResume of kvcache.Causal).

#include <cstdint>
#include <optional>
#include <span>

#include "extents.h"

namespace ringkv::detail {

// The position below which a sequence's tokens are released when a pass starts:
// memory positions before its lowest position in the pass, or before its next
// position (last + 1) when it is not in the pass. nullopt: nothing to release.
std::optional<Position> RetentionCut(std::span<const Extent> extents,
                                     std::optional<Position> lowest_in_pass, Position memory);

// Whether a sequence holding `extents` can continue at `pos` under a window:
// the window of pos, [max(0, pos - window), pos), must still be held (its start
// at or after the first position held) and pos at most one past the last.
bool CanResumeAt(std::span<const Extent> extents, Position pos, Position window);

}  // namespace ringkv::detail
