#pragma once
// The concrete snapshot kinds. Siblings, not a hierarchy, so a snapshot of one
// kind can never be mistaken for the other.

#include <gsl/narrow>

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
  RotatingSnapshot(BlockStore data, int from, int to, int idx)
      : data_(std::move(data)), from_(from), to_(to), idx_(idx) {}
  std::size_t Size() const noexcept override {
    return static_cast<std::size_t>(data_.Length()) * data_.Layout().BytesPerToken();
  }
  int FromOffset() const noexcept override { return from_; }
  int ToOffset() const noexcept override { return to_; }
  int RingIndex() const noexcept { return idx_; }
  const BlockStore& Data() const noexcept { return data_; }

 private:
  BlockStore data_;  // slots [0, min(offset, buffer length)) at snapshot time
  int from_;         // as asked (not clamped), like the reference
  int to_;
  int idx_;
};

}  // namespace ringkv::detail
