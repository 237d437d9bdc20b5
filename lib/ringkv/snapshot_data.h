#pragma once
// A snapshot's contents as plain tensors and offsets, and back: what the prompt
// cache writes to and reads from disk. Export copies; Import validates fully
// (ringkv::SnapshotError naming the field and values) before building anything.

#include <cstdint>
#include <memory>

#include "ringkv/snapshot.h"
#include "ringkv/tensor.h"

namespace ringkv {

struct SnapshotData {
  enum class Kind : std::uint8_t {
    kKv,        // a KVCache span: slots are tokens [from, to)
    kRotating,  // a RotatingKVCache ring in storage order, with its write cursor
  };
  Kind kind = Kind::kKv;
  int from = 0;
  int to = 0;
  int ring_index = 0;  // kRotating only
  Tensor keys;         // [1, Hkv, slots, D], contiguous
  Tensor values;       // [1, Hkv, slots, Dv], contiguous
};

// A contiguous copy of the snapshot's K/V. Throws ringkv::SnapshotError for a
// snapshot kind it does not know.
SnapshotData ExportSnapshot(const Snapshot& snapshot);

// A snapshot that KVCache (kKv) or RotatingKVCache(window) (kRotating) can
// Restore. Checks shapes, dtypes, offsets and the ring invariants the caches
// rely on: kKv needs slots == to - from >= 1 and from >= 0; kRotating needs
// slots == ring_index == to when to <= window, else either slots == window with
// ring_index in [1, window] (decode layout) or window < slots <= to with
// ring_index == slots (after a prefill chunk).
std::unique_ptr<Snapshot> ImportSnapshot(const SnapshotData& data, int window,
                                         std::int64_t block_tokens);

}  // namespace ringkv
