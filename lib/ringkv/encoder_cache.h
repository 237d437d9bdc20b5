#pragma once
// The reference's EncoderCache: position-independent keys and values (e.g. the
// output of an image or audio encoder that a decoder cross-attends to), stored
// once per encoder input and returned as stored: every row of a pass sees all of
// its sequence's encoder keys, with no causal or window rule.
//
// The reference keeps one encoder state for the whole cache (and is not safe
// with several sequences). Here each sequence has its own: a pass whose batch
// carries an encoder input for sequence s (StartForward with encoder rows) makes
// the next Update store it for s; rows of other sequences keep seeing theirs.
// CopyPrefix shares the source's encoder K/V with dst (no copy) when the
// encoder input's position lies inside the copied prefix; Remove over that
// position forgets it, and a Remove before it moves it down as the decoder's
// tokens move (the reference keeps the old position).
//
// Histories: a BatchHistory keeps the encoder K/V it reads alive, so a later
// Update (which replaces, never rewrites) leaves it valid and reading what was
// stored when it was taken; StartForward, CopyPrefix, Remove and RestoreState
// make it stale.

#include <cstdint>
#include <memory>
#include <span>

#include "ringkv/dtype.h"
#include "ringkv/sequence_cache.h"

namespace ringkv {

class EncoderCache final : public SequenceCache {
 public:
  // Keys/values are stored as `dtype` (converted in the one copy).
  explicit EncoderCache(DType dtype = DType::kF16);
  ~EncoderCache() override;
  EncoderCache(EncoderCache&&) noexcept;
  EncoderCache& operator=(EncoderCache&&) noexcept;

  void StartForward(const Batch& batch, ForwardMode mode = ForwardMode::kStore) override;
  // The batch rows that are encoder inputs this pass (the reference's
  // batch.Multimodal indices): the one with the highest index gives the
  // encoder input's position. Reset by StartForward. Throws, changing nothing,
  // for a row outside the batch or rows of two sequences (one pass stores one
  // encoder output: Update takes one K/V pair).
  void SetEncoderRows(std::span<const std::int64_t> rows);
  // Encoder K/V have no causal structure: accepted and ignored.
  void SetNonCausalRows(std::span<const std::int64_t> rows) override;
  // keys [1, Hkv, Te, D], values [1, Hkv, Te, Dv]: the encoder output of the
  // pass's encoder input (Te tokens, any Te), stored for that input's sequence and
  // layer (the pass's first Update drops what the sequence held for every layer:
  // a new encoder input replaces the old one). Without an encoder input this pass,
  // or in a kReserve pass, it checks its input and stores nothing. Every
  // sequence's K/V of one layer share Hkv, D and Dv. Returns Get(layer).
  BatchHistory Update(int layer, const Tensor& keys, const Tensor& values) override;
  BatchHistory Get(int layer) const override;
  void CopyPrefix(SequenceId src, SequenceId dst, Position len) override;
  bool CanResume(SequenceId seq, Position pos) const override;  // always true
  void Remove(SequenceId seq, Position begin, Position end) override;
  std::unique_ptr<State> SaveState() const override;
  void RestoreState(const State& state) override;

  // Whether `seq` has encoder K/V stored (the reference's EncoderCached()).
  bool EncoderCached(SequenceId seq) const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringkv
