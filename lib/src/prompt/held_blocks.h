#pragma once
// The storage blocks the prompt cache's snapshots reference, each counted once
// however many snapshots share it: what the trie really keeps resident, and the
// figure the byte budget bounds.

#include <cstddef>
#include <unordered_map>

#include "ringkv/layer_caches.h"

namespace ringkv::detail {

class HeldBlocks {
 public:
  // A snapshot enters or leaves the set of held snapshots (null: nothing).
  void Add(const Snapshot* snapshot);
  void Remove(const Snapshot* snapshot) noexcept;
  void Add(const LayerSnapshot* snapshot);
  void Remove(const LayerSnapshot* snapshot) noexcept;
  // One reference to a block (identified by its address) of `bytes` enters or
  // leaves the set: for snapshot kinds this file does not know.
  void AddBlock(const void* id, std::size_t bytes);
  void RemoveBlock(const void* id) noexcept;

  // Bytes of the distinct blocks held.
  std::size_t Bytes() const noexcept { return bytes_; }
  void Clear() noexcept;
  void Swap(HeldBlocks& other) noexcept;

 private:
  struct Held {
    std::size_t refs = 0;  // held snapshots referencing the block
    std::size_t bytes = 0;
  };
  std::unordered_map<const void*, Held> blocks_;
  std::size_t bytes_ = 0;
};

}  // namespace ringkv::detail
