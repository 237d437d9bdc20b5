#include "extents.h"

#include <algorithm>
#include <gsl/assert>

namespace ringkv::detail {
namespace {

// The first extent whose last position is >= pos.
std::span<const Extent>::iterator FirstEndingAfter(std::span<const Extent> extents,
                                                   Position pos) noexcept {
  return std::partition_point(extents.begin(), extents.end(),
                              [pos](const Extent& e) { return e.End() <= pos; });
}

}  // namespace

std::int64_t TokenCount(std::span<const Extent> extents) noexcept {
  std::int64_t total = 0;
  for (const Extent& e : extents) total += e.count;
  return total;
}

bool ContainsPosition(std::span<const Extent> extents, Position pos) noexcept {
  const auto it = FirstEndingAfter(extents, pos);
  return it != extents.end() && it->pos <= pos;
}

void AppendPositions(std::span<const Extent> extents, std::vector<Position>& out) {
  for (const Extent& e : extents) {
    for (Position p = e.pos; p < e.End(); ++p) out.push_back(p);
  }
}

void DropBelow(ExtentList& extents, Position pos) noexcept {
  const auto it = FirstEndingAfter(extents, pos);
  const auto first = extents.begin() + (it - std::span<const Extent>(extents).begin());
  extents.erase(extents.begin(), first);
  if (!extents.empty() && extents.front().pos < pos) {
    Extent& e = extents.front();
    const Position cut = pos - e.pos;
    e.row += cut;
    e.count -= cut;
    e.pos = pos;
  }
}

void KeepBelow(ExtentList& extents, Position pos) noexcept {
  const auto it = FirstEndingAfter(extents, pos);
  auto keep = static_cast<std::size_t>(it - std::span<const Extent>(extents).begin());
  if (keep < extents.size() && extents[keep].pos < pos) {
    extents[keep].count = pos - extents[keep].pos;
    ++keep;
  }
  extents.resize(keep);
}

std::int64_t CountAtOrAbove(std::span<const Extent> extents, Position pos) noexcept {
  std::int64_t total = 0;
  for (auto it = extents.rbegin(); it != extents.rend() && it->End() > pos; ++it) {
    total += it->End() - std::max(it->pos, pos);
  }
  return total;
}

void RemoveRange(std::span<const Extent> in, Position begin, Position end, ExtentList& out) {
  Expects(begin <= end);
  out.clear();
  const Position delta = end - begin;
  for (const Extent& e : in) {
    if (e.End() <= begin) {
      out.push_back(e);
      continue;
    }
    if (e.pos < begin) {
      Extent head = e;
      head.count = begin - e.pos;
      out.push_back(head);
    }
    if (e.End() > end) {
      Extent tail = e;
      const Position skip = std::max<Position>(0, end - e.pos);
      tail.row += skip;
      tail.count -= skip;
      tail.pos = e.pos + skip - delta;
      // Never joined to the extent before it, even where rows and positions now
      // continue: the moved tokens stay their own extents (Remove rewrites them).
      out.push_back(tail);
    }
  }
}

void InsertToken(ExtentList& extents, BlockId block, std::int32_t row, Position pos) {
  const auto it = FirstEndingAfter(extents, pos);
  auto at = static_cast<std::size_t>(it - std::span<const Extent>(extents).begin());
  Expects(at == extents.size() || extents[at].pos > pos);
  // Joins the extent before it?
  if (at > 0) {
    Extent& before = extents[at - 1];
    if (before.block == block && before.row + before.count == row && before.End() == pos) {
      ++before.count;
      // ... and now touches the one after it?
      if (at < extents.size()) {
        const Extent& after = extents[at];
        if (after.block == block && after.row == row + 1 && after.pos == pos + 1) {
          before.count += after.count;
          extents.erase(extents.begin() + static_cast<std::ptrdiff_t>(at));
        }
      }
      return;
    }
  }
  if (at < extents.size()) {
    Extent& after = extents[at];
    if (after.block == block && after.row == row + 1 && after.pos == pos + 1) {
      --after.row;
      --after.pos;
      ++after.count;
      return;
    }
  }
  extents.insert(extents.begin() + static_cast<std::ptrdiff_t>(at), Extent{block, row, 1, pos});
}

std::int32_t RowsUsedIn(std::span<const Extent> extents, BlockId block) noexcept {
  std::int32_t rows = 0;
  for (const Extent& e : extents) {
    if (e.block == block) rows = std::max(rows, e.row + e.count);
  }
  return rows;
}

bool UsesBlock(std::span<const Extent> extents, BlockId block) noexcept {
  return std::any_of(extents.begin(), extents.end(),
                     [block](const Extent& e) { return e.block == block; });
}

}  // namespace ringkv::detail
