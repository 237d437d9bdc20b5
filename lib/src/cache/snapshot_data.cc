#include "ringkv/snapshot_data.h"

#include <fmt/format.h>

#include <gsl/narrow>

#include "block_store.h"
#include "kv_access.h"
#include "kv_input.h"
#include "ringkv/error.h"
#include "ringkv/kv_history.h"
#include "snapshots.h"

namespace ringkv {
namespace {

// K and V of every slot of `store`, as fresh contiguous tensors.
void CopyOut(const detail::BlockStore& store, SnapshotData& out) {
  KvView view;
  detail::AddRange(view, &store, 0, store.Length());
  out.keys = view.ConcatKeys().Clone();
  out.values = view.ConcatValues().Clone();
}

[[noreturn]] void Fail(const std::string& what) { throw SnapshotError("[ImportSnapshot] " + what); }

// The ring invariants RotatingKVCache keeps (rotating_kv_cache.cc): see snapshot_data.h.
void CheckRing(const SnapshotData& data, std::int64_t slots, int window) {
  if (data.to <= window) {
    if (slots != data.to || data.ring_index != data.to) {
      Fail(
          fmt::format("a window of {} at offset {} must hold {} slots with ring index {}, not {} "
                      "slots with ring index {}",
                      window, data.to, data.to, data.to, slots, data.ring_index));
    }
    return;
  }
  const bool decode_layout = slots == window && data.ring_index >= 1 && data.ring_index <= window;
  const bool prefill_layout = slots > window && slots <= data.to && data.ring_index == slots;
  if (!decode_layout && !prefill_layout) {
    Fail(fmt::format("a wrapped window of {} at offset {} cannot hold {} slots with ring index {}",
                     window, data.to, slots, data.ring_index));
  }
}

}  // namespace

SnapshotData ExportSnapshot(const Snapshot& snapshot) {
  SnapshotData out;
  out.from = snapshot.FromOffset();
  out.to = snapshot.ToOffset();
  if (const auto* kv = dynamic_cast<const detail::KvSnapshot*>(&snapshot)) {
    out.kind = SnapshotData::Kind::kKv;
    CopyOut(kv->Data(), out);
  } else if (const auto* ring = dynamic_cast<const detail::RotatingSnapshot*>(&snapshot)) {
    out.kind = SnapshotData::Kind::kRotating;
    out.ring_index = ring->RingIndex();
    CopyOut(ring->Data(), out);
  } else {
    throw SnapshotError("[ExportSnapshot] the snapshot is of a kind ringkv does not know");
  }
  return out;
}

std::unique_ptr<Snapshot> ImportSnapshot(const SnapshotData& data, int window,
                                         std::int64_t block_tokens) {
  if (block_tokens < 1) Fail(fmt::format("block_tokens {} must be >= 1", block_tokens));
  if (data.keys.Empty() || data.values.Empty()) Fail("keys and values must not be empty");
  detail::KvLayout layout;
  try {
    layout = detail::CheckKvInput("ImportSnapshot", data.keys, data.values, nullptr);
  } catch (const Error& e) {
    throw SnapshotError(e.what());
  }
  const std::int64_t slots = data.keys.Dim(2);
  if (data.from < 0 || data.from >= data.to) {
    Fail(fmt::format("offsets [{}, {}) must satisfy 0 <= from < to", data.from, data.to));
  }
  detail::BlockStore store(block_tokens);
  store.SetLayout(layout);
  if (data.kind == SnapshotData::Kind::kKv) {
    if (slots != data.to - data.from) {
      Fail(fmt::format("a span [{}, {}) cannot hold {} slots", data.from, data.to, slots));
    }
    // Start at the block phase a live cache has at `from`, so Restore shares
    // whole blocks instead of copying rows.
    const std::int64_t phase = data.from % block_tokens;
    store.Resize(phase);
    store.Append(data.keys.Contiguous(), data.values.Contiguous());
    if (phase > 0) store.DropFront(phase);
    return std::make_unique<detail::KvSnapshot>(std::move(store), data.from, data.to);
  }
  if (data.kind != SnapshotData::Kind::kRotating) Fail("unknown snapshot kind");
  if (window < 1) Fail(fmt::format("window {} must be >= 1", window));
  CheckRing(data, slots, window);
  store.Append(data.keys.Contiguous(), data.values.Contiguous());
  return std::make_unique<detail::RotatingSnapshot>(std::move(store), data.from, data.to,
                                                    data.ring_index, window);
}

}  // namespace ringkv
