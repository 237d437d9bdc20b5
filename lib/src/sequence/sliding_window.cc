#include "sliding_window.h"

#include <algorithm>

namespace ringkv::detail {

std::optional<Position> RetentionCut(std::span<const Extent> extents,
                                     std::optional<Position> lowest_in_pass, Position memory) {
  if (extents.empty()) return std::nullopt;
  const std::int64_t lowest = lowest_in_pass.has_value() ? std::int64_t{*lowest_in_pass}
                                                         : std::int64_t{extents.back().End()};
  const std::int64_t cut = lowest - memory;
  if (cut <= extents.front().pos) return std::nullopt;
  return static_cast<Position>(cut);
}

bool CanResumeAt(std::span<const Extent> extents, Position pos, Position window) {
  if (extents.empty()) return false;
  const std::int64_t first = extents.front().pos;
  const std::int64_t last = std::int64_t{extents.back().End()} - 1;
  const std::int64_t window_start = std::max<std::int64_t>(0, std::int64_t{pos} - window);
  return window_start >= first && pos <= last + 1;
}

}  // namespace ringkv::detail
