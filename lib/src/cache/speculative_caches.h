#pragma once
// The per-layer speculation wrappers (see ringkv/speculation.h).

#include "block_store.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv::detail {

// State management is disabled on a wrapper, as in the reference: it lives for
// one forward.
class SpeculativeLayer : public AttentionCache {
 public:
  explicit SpeculativeLayer(int offset) : offset_(offset) {}
  void Free() noexcept override {}
  int Offset() const noexcept override { return offset_; }
  std::unique_ptr<ringkv::Snapshot> Snapshot(int) const override { return nullptr; }
  // False for every target, but a negative one throws ringkv::Error (the Cache contract).
  bool Restore(const ringkv::Snapshot*, int target) override;
  std::unique_ptr<ringkv::Snapshot> Merge(
      std::unique_ptr<ringkv::Snapshot>&& parent,
      std::unique_ptr<ringkv::Snapshot>&& child) const override {
    parent.reset();
    child.reset();
    return nullptr;
  }
  std::pair<std::unique_ptr<ringkv::Snapshot>, std::unique_ptr<ringkv::Snapshot>> Split(
      std::unique_ptr<ringkv::Snapshot>&& snapshot, int) const override {
    return {nullptr, std::move(snapshot)};
  }

  // Tokens drafted so far.
  virtual int Drafted() const noexcept = 0;
  // Whether drafts already sit in the live cache (so Commit cannot fail).
  virtual bool WritesThrough() const noexcept = 0;
  // Keeps the first n drafted tokens in the live cache; n in [0, Drafted()].
  virtual void Commit(int n) = 0;
  // Leaves the live cache as it was when the speculation began.
  virtual void Rollback() noexcept = 0;
  // After Commit: further drafts are refused, so none can reach the live cache.
  void Close() noexcept { closed_ = true; }

 protected:
  // Throws ringkv::Error when the wrapper is closed or the L new keys
  // [1, Hkv, L, D] would take the offset past INT_MAX.
  void CheckDraft(const char* function, const Tensor& keys) const;
  bool Rewindable(int) const noexcept override { return false; }

  int offset_;
  bool closed_ = false;
};

class SpeculativeKvCache final : public SpeculativeLayer {
 public:
  explicit SpeculativeKvCache(KVCache* target);
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  KvView State() const override { return target_->State(); }
  std::optional<KvStorage> Storage() const noexcept override { return target_->Storage(); }
  int Drafted() const noexcept override { return end_ - start_; }
  bool WritesThrough() const noexcept override { return true; }
  void Commit(int n) override;
  void Rollback() noexcept override;

 private:
  KVCache* target_;
  int start_;
  int end_;
};

class IsolatedKvCache final : public SpeculativeLayer {
 public:
  explicit IsolatedKvCache(const KVCache* target);
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  KvView State() const override;
  std::optional<KvStorage> Storage() const noexcept override { return target_->Storage(); }
  int Drafted() const noexcept override { return static_cast<int>(drafts_.Length()); }
  bool WritesThrough() const noexcept override { return false; }
  void Commit(int) override {}
  void Rollback() noexcept override {}

 private:
  const KVCache* target_;
  BlockStore drafts_;  // the drafted tokens, [0, Offset() - target offset)
};

class SpeculativeRotatingKvCache final : public SpeculativeLayer {
 public:
  explicit SpeculativeRotatingKvCache(RotatingKVCache* target);
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  KvView State() const override;
  std::optional<KvStorage> Storage() const noexcept override { return target_->Storage(); }
  int Drafted() const noexcept override { return static_cast<int>(drafts_.Length()); }
  bool WritesThrough() const noexcept override { return false; }
  void Commit(int n) override;
  void Rollback() noexcept override {}  // the live cache was never touched

 private:
  RotatingKVCache* target_;
  BlockStore drafts_;
};

}  // namespace ringkv::detail
