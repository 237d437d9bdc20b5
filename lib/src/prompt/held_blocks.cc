#include "held_blocks.h"

#include <gsl/assert>

#include "../cache/snapshots.h"

namespace ringkv::detail {
namespace {

const BlockStore* StoreOf(const Snapshot* snapshot) noexcept {
  if (const auto* kv = dynamic_cast<const KvSnapshot*>(snapshot)) return &kv->Data();
  if (const auto* ring = dynamic_cast<const RotatingSnapshot*>(snapshot)) return &ring->Data();
  return nullptr;
}

}  // namespace

void HeldBlocks::Add(const Snapshot* snapshot) {
  const BlockStore* store = StoreOf(snapshot);
  if (store == nullptr) return;
  store->ForEachBlock([&](const void* id, std::size_t bytes) { AddBlock(id, bytes); });
}

void HeldBlocks::Remove(const Snapshot* snapshot) noexcept {
  const BlockStore* store = StoreOf(snapshot);
  if (store == nullptr) return;
  store->ForEachBlock([&](const void* id, std::size_t /*bytes*/) { RemoveBlock(id); });
}

void HeldBlocks::AddBlock(const void* id, std::size_t bytes) {
  Held& held = blocks_[id];
  if (held.refs++ == 0) {
    held.bytes = bytes;
    bytes_ += bytes;
  }
}

void HeldBlocks::RemoveBlock(const void* id) noexcept {
  const auto it = blocks_.find(id);
  Expects(it != blocks_.end() && it->second.refs > 0);
  if (--it->second.refs == 0) {
    bytes_ -= it->second.bytes;
    blocks_.erase(it);
  }
}

void HeldBlocks::Add(const LayerSnapshot* snapshot) {
  if (snapshot == nullptr) return;
  for (std::size_t i = 0; i < snapshot->Layers(); ++i) Add(snapshot->Layer(i));
}

void HeldBlocks::Remove(const LayerSnapshot* snapshot) noexcept {
  if (snapshot == nullptr) return;
  for (std::size_t i = 0; i < snapshot->Layers(); ++i) Remove(snapshot->Layer(i));
}

void HeldBlocks::Clear() noexcept {
  blocks_.clear();
  bytes_ = 0;
}

void HeldBlocks::Swap(HeldBlocks& other) noexcept {
  blocks_.swap(other.blocks_);
  std::swap(bytes_, other.bytes_);
}

}  // namespace ringkv::detail
