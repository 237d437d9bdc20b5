#pragma once
// The state-management contract every cache kind shares (names from the
// reference, Ollama's mlxrunner cache), and the attention-cache contract.

#include <memory>
#include <optional>
#include <utility>

#include "ringkv/dtype.h"
#include "ringkv/kv_history.h"
#include "ringkv/kv_storage.h"
#include "ringkv/snapshot.h"
#include "ringkv/tensor.h"

namespace ringkv {

class Cache {
 public:
  virtual ~Cache() = default;
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // The live keys and values, in storage order, as views.
  virtual KvView State() const = 0;
  // Releases all storage; the cache is as new (any K/V layout may follow).
  virtual void Free() noexcept = 0;
  virtual int Offset() const noexcept = 0;
  // State from from_offset to Offset(); null when there is nothing to snapshot.
  // from_offset > Offset() throws ringkv::Error.
  virtual std::unique_ptr<ringkv::Snapshot> Snapshot(int from_offset) const = 0;
  // Brings the cache to `target`; a null snapshot rewinds using live state.
  // Returns false when the target is unreachable (the reference's rules); throws
  // ringkv::Error for a negative target or a snapshot of another cache kind.
  virtual bool Restore(const ringkv::Snapshot* snapshot, int target) = 0;

  // Rewinding live state by name (mlx-lm's trim, llama.cpp's seq_rm of a tail):
  //   CanRewind(target): whether Rewind(target) would succeed; changes nothing.
  //   Rewind(target):    Restore(nullptr, target): true, or false with nothing
  //                      changed (target > Offset(), or a kind's own rule: a
  //                      RotatingKVCache whose window has moved, a speculation
  //                      wrapper).
  //   Trim(n):           removes the last min(n, Offset()) tokens, i.e.
  //                      Rewind(Offset() - min(n, Offset())); returns that count
  //                      when the rewind succeeds, else 0 with nothing changed.
  // A negative target or n throws ringkv::Error, changing nothing.
  bool CanRewind(int target) const;
  bool Rewind(int target);
  int Trim(int n);

  // Combines sequential snapshots [a, b) and [b, c) into [a, c). Ownership: on
  // success both inputs are consumed (left null); when it throws ringkv::Error
  // (snapshots of another kind, not adjacent, ...) both are left untouched, so a
  // failed call destroys nothing of the caller's.
  virtual std::unique_ptr<ringkv::Snapshot> Merge(
      std::unique_ptr<ringkv::Snapshot>&& parent,
      std::unique_ptr<ringkv::Snapshot>&& child) const = 0;
  // Divides [a, c) at `at` into [a, at) and [at, c); the input is consumed on
  // success, untouched on error (as Merge). Kinds that cannot split return
  // {null, snapshot}.
  virtual std::pair<std::unique_ptr<ringkv::Snapshot>, std::unique_ptr<ringkv::Snapshot>> Split(
      std::unique_ptr<ringkv::Snapshot>&& snapshot, int at) const = 0;

 protected:
  Cache() = default;
  Cache(Cache&&) = default;
  Cache& operator=(Cache&&) = default;

  // Whether a live rewind to target (>= 0) succeeds: the one decision behind
  // both CanRewind and each kind's Restore(nullptr, target).
  virtual bool Rewindable(int target) const noexcept = 0;
};

// A cache that backs an attention layer.
class AttentionCache : public Cache {
 public:
  // Appends keys [1, Hkv, L, D] and values [1, Hkv, L, Dv]; returns what this
  // layer's attention reads (valid until the next mutating call; a stale view
  // throws ringkv::Error, see kv_history.h).
  virtual KVHistory Update(const Tensor& keys, const Tensor& values) = 0;
  // The dtypes Update stores K and V in (it converts or quantizes any float input
  // to them), when the cache was built with them; nullopt when the first
  // Update's input decides.
  virtual std::optional<KvStorage> Storage() const noexcept = 0;
  // Storage()'s dtype when K and V share one; nullopt when they differ (e.g.
  // int8 keys, int4 values) or the first Update decides.
  std::optional<DType> StorageDtype() const noexcept;

 protected:
  AttentionCache() = default;
  AttentionCache(AttentionCache&&) = default;
  AttentionCache& operator=(AttentionCache&&) = default;
};

}  // namespace ringkv
