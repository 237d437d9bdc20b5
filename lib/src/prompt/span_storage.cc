#include "span_storage.h"

#include <fmt/format.h>

#include <gsl/assert>

#include "../cache/snapshots.h"
#include "ringkv/error.h"

namespace ringkv::detail {
namespace {

const KvSnapshot& AsSpan(const Snapshot& snapshot) {
  const auto* kv = dynamic_cast<const KvSnapshot*>(&snapshot);
  if (kv == nullptr)
    throw SnapshotError("[PromptCache] a KVCache layer holds another snapshot kind");
  return *kv;
}

// One block of exactly the stores' total length, holding their slots in order.
BlockStore RightSized(const BlockStore& a, const BlockStore* b) {
  const std::int64_t length = a.Length() + (b == nullptr ? 0 : b->Length());
  BlockStore out(length);
  out.SetLayout(a.Layout());
  out.AppendCopyOf(a, 0, a.Length());
  if (b != nullptr) out.AppendCopyOf(*b, 0, b->Length());
  return out;
}

}  // namespace

std::unique_ptr<Snapshot> Compact(const Snapshot& snapshot, std::int64_t block_tokens, int window) {
  if (const auto* kv = dynamic_cast<const KvSnapshot*>(&snapshot)) {
    const BlockStore& store = kv->Data();
    const bool right_sized = store.BlockCount() == 1 && store.BlockTokens() == store.Length();
    if (store.Length() == 0 || store.Length() >= block_tokens || right_sized) return nullptr;
    return std::make_unique<KvSnapshot>(RightSized(store, nullptr), kv->FromOffset(),
                                        kv->ToOffset());
  }
  const auto* ring = dynamic_cast<const RotatingSnapshot*>(&snapshot);
  Expects(ring != nullptr && window > 0);
  const BlockStore& store = ring->Data();
  if (store.Length() == 0 || window >= block_tokens || store.BlockTokens() == window) {
    return nullptr;
  }
  BlockStore out(window);
  out.SetLayout(store.Layout());
  out.AppendCopyOf(store, 0, store.Length());
  return std::make_unique<RotatingSnapshot>(std::move(out), ring->FromOffset(), ring->ToOffset(),
                                            ring->RingIndex(), ring->Window());
}

std::size_t CompactBytes(std::int64_t slots, std::int64_t phase, std::int64_t block_tokens,
                         int window, std::size_t bytes_per_token) {
  std::int64_t rows = 0;
  if (window == 0) {
    rows = slots < block_tokens ? slots
                                : (phase + slots + block_tokens - 1) / block_tokens * block_tokens;
  } else {
    const std::int64_t block = window < block_tokens ? window : block_tokens;
    rows = (phase + slots + block - 1) / block * block;
  }
  return static_cast<std::size_t>(rows) * bytes_per_token;
}

std::unique_ptr<Snapshot> MergeSpans(const Snapshot& parent, const Snapshot& child,
                                     std::int64_t block_tokens) {
  const KvSnapshot& p = AsSpan(parent);
  const KvSnapshot& c = AsSpan(child);
  if (p.ToOffset() != c.FromOffset()) {
    throw SnapshotError(fmt::format("[PromptCache] spans [{}, {}) and [{}, {}) are not adjacent",
                                    p.FromOffset(), p.ToOffset(), c.FromOffset(), c.ToOffset()));
  }
  if (!(p.Data().Layout() == c.Data().Layout())) {
    throw SnapshotError("[PromptCache] adjacent spans hold different K/V layouts");
  }
  if (p.Data().Length() + c.Data().Length() < block_tokens) {
    return std::make_unique<KvSnapshot>(RightSized(p.Data(), &c.Data()), p.FromOffset(),
                                        c.ToOffset());
  }
  // Start at the phase a live cache has at `from`: AppendFrom then shares every
  // whole block whose phase lines up (the child's, usually) and copies the rest.
  const std::int64_t phase = p.FromOffset() % block_tokens;
  BlockStore out(block_tokens);
  out.SetLayout(p.Data().Layout());
  out.Resize(phase);
  out.AppendFrom(p.Data(), 0, p.Data().Length());
  out.AppendFrom(c.Data(), 0, c.Data().Length());
  if (phase > 0) out.DropFront(phase);
  Ensures(out.Length() == c.ToOffset() - p.FromOffset());
  return std::make_unique<KvSnapshot>(std::move(out), p.FromOffset(), c.ToOffset());
}

}  // namespace ringkv::detail
