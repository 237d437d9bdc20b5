#pragma once
// Cache state paged out for later Restore. Caller-owned; destroying it releases
// the storage blocks it shares with the cache (snapshots are O(blocks): they
// share reference-counted, copy-on-write blocks, see docs/caches.md).

#include <cstddef>

namespace ringkv {

class Snapshot {
 public:
  virtual ~Snapshot() = default;
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // Bytes of K and V data the snapshot covers (what a copy would take; the
  // blocks themselves are shared until someone writes).
  virtual std::size_t Size() const noexcept = 0;
  virtual int FromOffset() const noexcept = 0;
  virtual int ToOffset() const noexcept = 0;

 protected:
  Snapshot() = default;
};

}  // namespace ringkv
