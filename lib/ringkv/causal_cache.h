#pragma once
// The multi-sequence causal cache (the reference's kvcache.Causal) on a pool of
// paged, reference-counted, copy-on-write blocks. One object holds every
// sequence's K/V for every layer of one layer type, within a capacity fixed at
// construction. A block holds block_tokens consecutive tokens of one sequence
// for all layers; blocks are shared by CopyPrefix and by sequence snapshots, and
// a write into a shared block copies that block first.
//
// Visibility (the reference's rules, docs/multi_sequence.md): batch row i (token
// at position q of sequence s) sees a stored token at position p iff it belongs
// to s, p <= q (unless row i is non-causal this pass), p >= q - window (note: one
// more token than the rotating cache's window of the same number), and, with
// chunked attention of chunk c, p >= q - q % c.
//
// Sliding-window memory: tokens older than `memory` positions before a
// sequence's oldest position in the pass (or its next position, for sequences
// not in the pass) are released at StartForward, so a sequence keeps at most
// about memory + block_tokens tokens however long it runs.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/sequence_cache.h"

namespace ringkv {

class SequenceSnapshot;

struct CausalCacheOptions {
  // What every stored token looks like; Update refuses anything else.
  int layers = 1;
  std::int64_t kv_heads = 0;   // Hkv
  std::int64_t key_dim = 0;    // D
  std::int64_t value_dim = 0;  // Dv
  // Storage of the keys, and of the values unless value_dtype is set: f32, f16,
  // bf16, or quantized (int8, int4, int4h: kv_storage.h). Update converts or
  // quantizes any float input as it writes.
  DType dtype = DType::kF16;
  // The values' storage when it differs from the keys' (both quantized, e.g.
  // int8 keys and int4 values).
  std::optional<DType> value_dtype;

  // The pool: exactly one of the two is nonzero. Rounded down to whole blocks.
  std::int64_t capacity_tokens = 0;
  std::size_t capacity_bytes = 0;
  // Long per-head runs keep the kernel's loads streaming (docs/benchmarks.md
  // compares block sizes); a sequence wastes at most one partial block.
  std::int64_t block_tokens = 256;
  int max_sequences = 1;         // distinct sequence ids stored at once
  std::int64_t max_batch = 512;  // tokens per StartForward

  // Attention pattern (0: none). memory >= window (0: = window); with more than
  // one sequence it grows to at least window + 1, as the reference's does.
  Position window = 0;
  Position memory = 0;
  Position chunk = 0;

  // Re-rotates keys that Remove moves; empty: Remove in the middle of a
  // sequence is not supported (it throws and changes nothing).
  ShiftFn shift;
};

class CausalCache final : public SequenceCache {
 public:
  // Throws ringkv::Error on inconsistent options (naming the field and value).
  explicit CausalCache(CausalCacheOptions options);
  ~CausalCache() override;
  CausalCache(CausalCache&&) noexcept;
  CausalCache& operator=(CausalCache&&) noexcept;

  void StartForward(const Batch& batch, ForwardMode mode = ForwardMode::kStore) override;
  void SetNonCausalRows(std::span<const std::int64_t> rows) override;
  BatchHistory Update(int layer, const Tensor& keys, const Tensor& values) override;
  BatchHistory Get(int layer) const override;
  void CopyPrefix(SequenceId src, SequenceId dst, Position len) override;
  bool CanResume(SequenceId seq, Position pos) const override;
  void Remove(SequenceId seq, Position begin, Position end) override;
  std::unique_ptr<State> SaveState() const override;
  void RestoreState(const State& state) override;

  // The sequence's tokens at positions [0, len) (all of them by default) in the
  // same copy-on-write form the single-sequence caches' snapshots use: sharing
  // blocks, no K/V copy. Throws for an unknown sequence.
  std::unique_ptr<SequenceSnapshot> SnapshotSequence(SequenceId seq,
                                                     Position len = kEndOfSequence) const;
  // Makes dst hold exactly the snapshot's tokens (sharing its blocks). Throws,
  // changing nothing, when the snapshot's layout differs from this cache's or
  // the pool cannot hold it.
  void RestoreSequence(SequenceId dst, const SequenceSnapshot& snapshot);

  const CausalCacheOptions& Options() const noexcept;
  std::int64_t CapacityBlocks() const noexcept;
  std::int64_t UsedBlocks() const noexcept;    // blocks referenced by any sequence or snapshot
  std::size_t BytesPerBlock() const noexcept;  // all layers, K and V
  std::vector<SequenceId> Sequences() const;   // ids holding at least one token
  // Positions the sequence holds, ascending (empty for an unknown id).
  std::vector<Position> SequencePositions(SequenceId seq) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One sequence's tokens paged out of a CausalCache. Caller-owned; it keeps the
// blocks it shares alive (their memory counts against the pool that made it).
class SequenceSnapshot {
 public:
  virtual ~SequenceSnapshot() = default;
  SequenceSnapshot(const SequenceSnapshot&) = delete;
  SequenceSnapshot& operator=(const SequenceSnapshot&) = delete;

  virtual std::int64_t Tokens() const noexcept = 0;
  virtual std::size_t Size() const noexcept = 0;  // bytes of K/V it covers
  virtual std::vector<Position> Positions() const = 0;

 protected:
  SequenceSnapshot() = default;
};

}  // namespace ringkv
