#pragma once
// The multi-sequence cache contract (the reference's kvcache.Cache): one cache
// object serves every sequence of a model for every layer of one layer type.
// Sequences are integer ids chosen by the caller; a token is a (sequence,
// position) pair.
//
// One forward pass:
//   cache.StartForward(batch);                 // the pass's tokens: where they go, who sees what
//   for each layer:
//     BatchHistory h = cache.Update(layer, k, v);  // store the batch's K/V [1, Hkv, N, D]
//     Attention(q, h, scale, ctx, out);             // q [1, Hq, N, D], row i = batch token i
//
// Every call that fails throws ringkv::Error naming the argument and values and
// leaves the cache exactly as it was (the reference sometimes mutates before it
// fails; ringkv never does).

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>

#include "ringkv/batch_history.h"
#include "ringkv/tensor.h"

namespace ringkv {

using SequenceId = std::int32_t;
using Position = std::int32_t;

// Remove(seq, begin, kEndOfSequence) truncates: nothing after it moves.
inline constexpr Position kEndOfSequence = std::numeric_limits<Position>::max();

// The tokens of one forward pass: token i sits at positions[i] of sequence
// sequences[i] (the two spans have one entry per token). Any mix of sequences,
// any number of tokens each, in any order; positions need not be contiguous, but
// one sequence may not hold two tokens at the same position.
struct Batch {
  std::span<const Position> positions;
  std::span<const SequenceId> sequences;
};

enum class ForwardMode : std::uint8_t {
  kStore,    // assign storage to the batch's tokens and record them
  kReserve,  // size memory for the worst case; metadata (cells, sequences) untouched
};

// Called by Remove when tokens after the removed range move down by `delta`
// (< 0) positions: re-rotates their keys (e.g. RoPE by delta) in place.
// `keys` is a writable [1, Hkv, n, D] tensor of the layer's moved keys in the
// cache's dtype (f32, dequantised, when the keys are stored quantized; they are
// requantized after), `positions` their new positions (n entries). It may throw:
// the Remove then fails and changes nothing.
struct ShiftRequest {
  int layer = 0;
  Tensor& keys;
  std::span<const Position> positions;
  Position delta = 0;
};
using ShiftFn = std::function<void(const ShiftRequest&)>;

class SequenceCache {
 public:
  virtual ~SequenceCache() = default;
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;

  // Starts a forward pass over `batch`. kStore finds storage for every token and
  // records it (a full cache throws "cache full" naming the capacity and the
  // request, and changes nothing); kReserve only sizes memory.
  virtual void StartForward(const Batch& batch, ForwardMode mode = ForwardMode::kStore) = 0;
  // Rows (batch token indices) that see every token of their sequence in this
  // pass, later ones included (the reference's SetCausal Except list, e.g. the
  // tokens of one image). Reset by the next StartForward.
  virtual void SetNonCausalRows(std::span<const std::int64_t> rows) = 0;

  // Stores the pass's keys [1, Hkv, N, D] and values [1, Hkv, N, Dv] (N tokens, in
  // batch order, any float dtype and strides) for `layer`, and returns what the
  // pass's rows may see.
  virtual BatchHistory Update(int layer, const Tensor& keys, const Tensor& values) = 0;
  // What the pass's rows may see of `layer` (after its Update, or of what is
  // stored when the pass stores nothing for that layer).
  virtual BatchHistory Get(int layer) const = 0;

  // Makes dst's tokens at positions [0, len) those of src (whatever dst held is
  // dropped first). Shares storage: no K/V is copied.
  virtual void CopyPrefix(SequenceId src, SequenceId dst, Position len) = 0;
  // Whether the sequence can continue with its next token at `pos` (the
  // reference's rule: with a sliding window, the window of pos must still be stored).
  virtual bool CanResume(SequenceId seq, Position pos) const = 0;
  // Removes the sequence's tokens at positions [begin, end). Tokens at end and
  // later move down by end - begin (their keys re-rotated by the shift function);
  // end = kEndOfSequence truncates.
  virtual void Remove(SequenceId seq, Position begin, Position end) = 0;

  // The cache's whole state (which tokens it holds, where), sharing storage
  // copy-on-write: O(blocks), no K/V copy. RestoreState puts it back exactly;
  // WrapperCache uses the pair to make an operation on several caches all or
  // nothing. A state restores only into the cache that saved it (else it throws
  // ringkv::Error and changes nothing).
  class State {
   public:
    virtual ~State() = default;
  };
  virtual std::unique_ptr<State> SaveState() const = 0;
  virtual void RestoreState(const State& state) = 0;

 protected:
  SequenceCache() = default;
};

}  // namespace ringkv
