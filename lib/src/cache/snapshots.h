#pragma once
// The concrete snapshot kinds. Siblings, not a hierarchy, so a snapshot of one
// kind can never be mistaken for the other. Also the checks and the merge/split
// steps that KVCache, RotatingKVCache and LayerCaches share: they never take
// ownership, so a caller can validate everything before consuming anything.

#include <memory>
#include <utility>

#include "block_store.h"
#include "ringkv/snapshot.h"

namespace ringkv::detail {

// Tokens [from, to) of a KVCache, sharing the cache's blocks.
class KvSnapshot final : public Snapshot {
 public:
  KvSnapshot(BlockStore data, int from, int to) : data_(std::move(data)), from_(from), to_(to) {}
  std::size_t Size() const noexcept override {
    return static_cast<std::size_t>(data_.Length()) * data_.Layout().BytesPerToken();
  }
  int FromOffset() const noexcept override { return from_; }
  int ToOffset() const noexcept override { return to_; }
  const BlockStore& Data() const noexcept { return data_; }

 private:
  BlockStore data_;  // slots [0, to - from)
  int from_;
  int to_;
};

// The whole live ring of a RotatingKVCache (slots in storage order) and its cursor.
class RotatingSnapshot final : public Snapshot {
 public:
  RotatingSnapshot(BlockStore data, int from, int to, int idx, int window)
      : data_(std::move(data)), from_(from), to_(to), idx_(idx), window_(window) {}
  std::size_t Size() const noexcept override {
    return static_cast<std::size_t>(data_.Length()) * data_.Layout().BytesPerToken();
  }
  int FromOffset() const noexcept override { return from_; }
  int ToOffset() const noexcept override { return to_; }
  int RingIndex() const noexcept { return idx_; }
  int Window() const noexcept { return window_; }
  const BlockStore& Data() const noexcept { return data_; }

 private:
  BlockStore data_;  // slots [0, min(offset, buffer length)) at snapshot time
  int from_;         // as asked (not clamped), like the reference
  int to_;
  int idx_;
  int window_;  // the ring's max_size: its slot layout only fits a ring of that size
};

// The snapshot as the given kind, or ringkv::SnapshotError prefixed [function].
// `role` names it in the message ("snapshot", "parent", "child"); a ring
// snapshot must also come from a ring of `window`.
const KvSnapshot& AsKv(const char* function, const Snapshot& snapshot);
const RotatingSnapshot& AsRing(const char* function, const char* role, const Snapshot& snapshot,
                               int window);

// Throws ringkv::SnapshotError when the cache holds a K/V layout (it has one from
// its first Update until Free) and the snapshot's differs.
void CheckRestoreLayout(const char* function, const BlockStore& snapshot, const BlockStore& cache);
// Throws ringkv::SnapshotError unless `child` starts where `parent` ends and
// both hold one K/V layout.
void CheckKvMerge(const char* function, const KvSnapshot& parent, const KvSnapshot& child);
// [a, b) + [b, c) -> [a, c), sharing blocks; the inputs stay as they are.
std::unique_ptr<Snapshot> MergeKv(const KvSnapshot& parent, const KvSnapshot& child);
// Where `at` falls in [from, to): <= 0 before, >= length after (no overflow for any int).
std::int64_t SplitPoint(const Snapshot& snapshot, int at) noexcept;
// [a, c) -> [a, at), [at, c) for a < at < c, sharing blocks; the input stays.
std::pair<std::unique_ptr<Snapshot>, std::unique_ptr<Snapshot>> SplitKv(const KvSnapshot& snapshot,
                                                                        int at);

}  // namespace ringkv::detail
