#pragma once
// The sequences a CausalCache holds: a fixed number of slots (max_sequences),
// each with an id, its extents sorted by position, and its tail block (where it
// last wrote, so its next tokens can continue there). Slots and their extent
// vectors are reused, so sequences coming and going allocate nothing once
// their vectors have grown.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "extents.h"
#include "ringkv/sequence_cache.h"

namespace ringkv::detail {

struct SequenceSlot {
  SequenceId id = 0;
  bool live = false;  // holds at least one token
  ExtentList extents;
  BlockId tail = kNoBlock;
};

class SequenceTable {
 public:
  explicit SequenceTable(int max_sequences) : slots_(static_cast<std::size_t>(max_sequences)) {}

  std::vector<SequenceSlot>& Slots() noexcept { return slots_; }
  const std::vector<SequenceSlot>& Slots() const noexcept { return slots_; }

  // The live slot of `id`, or null.
  SequenceSlot* Find(SequenceId id) noexcept {
    const auto it = std::find_if(slots_.begin(), slots_.end(),
                                 [id](const SequenceSlot& s) { return s.live && s.id == id; });
    return it == slots_.end() ? nullptr : &*it;
  }
  const SequenceSlot* Find(SequenceId id) const noexcept {
    return const_cast<SequenceTable*>(this)->Find(id);  // NOLINT(*-const-cast)
  }
  // A slot that is not live, skipping `skip` of them (several new ids in one pass); null when full.
  SequenceSlot* Vacant(std::size_t skip = 0) noexcept {
    for (SequenceSlot& s : slots_) {
      if (!s.live && skip-- == 0) return &s;
    }
    return nullptr;
  }
  std::int64_t LiveCount() const noexcept {
    return std::count_if(slots_.begin(), slots_.end(),
                         [](const SequenceSlot& s) { return s.live; });
  }
  std::int64_t Capacity() const noexcept { return static_cast<std::int64_t>(slots_.size()); }

 private:
  std::vector<SequenceSlot> slots_;
};

}  // namespace ringkv::detail
