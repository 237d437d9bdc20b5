#pragma once
// The reference's WrapperCache: several caches used side by side by one model
// (an encoder cache and a causal cache; or a sliding-window cache and a global
// one for interleaved layers). Sequence operations and StartForward go to every
// cache; Update and Get go to the one chosen with SetLayerType.
//
// All or nothing: when a wrapped cache refuses StartForward, CopyPrefix or
// Remove, the caches that already accepted it are put back as they were (the
// reference unwinds StartForward only, and by removing tokens).

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "ringkv/sequence_cache.h"

namespace ringkv {

class WrapperCache final : public SequenceCache {
 public:
  // Borrows the caches (they must outlive the wrapper). Throws for an empty
  // list or a null entry.
  explicit WrapperCache(std::span<SequenceCache* const> caches);
  ~WrapperCache() override;

  // Selects the cache that Update and Get use until the next call (0 after
  // StartForward, as in the reference). Throws for a type out of range.
  void SetLayerType(std::size_t type);
  SequenceCache& UnderlyingCache() const noexcept;  // the selected one

  void StartForward(const Batch& batch, ForwardMode mode = ForwardMode::kStore) override;
  void SetNonCausalRows(std::span<const std::int64_t> rows) override;
  BatchHistory Update(int layer, const Tensor& keys, const Tensor& values) override;
  BatchHistory Get(int layer) const override;
  void CopyPrefix(SequenceId src, SequenceId dst, Position len) override;
  bool CanResume(SequenceId seq, Position pos) const override;  // every cache can
  void Remove(SequenceId seq, Position begin, Position end) override;
  std::unique_ptr<State> SaveState() const override;
  void RestoreState(const State& state) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringkv
