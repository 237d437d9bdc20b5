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
  bool Restore(const ringkv::Snapshot*, int) override { return false; }
  std::unique_ptr<ringkv::Snapshot> Merge(std::unique_ptr<ringkv::Snapshot>,
                                          std::unique_ptr<ringkv::Snapshot>) const override {
    return nullptr;
  }
  std::pair<std::unique_ptr<ringkv::Snapshot>, std::unique_ptr<ringkv::Snapshot>> Split(
      std::unique_ptr<ringkv::Snapshot> snapshot, int) const override {
    return {nullptr, std::move(snapshot)};
  }
  // Keeps the first n drafted tokens in the live cache.
  virtual void Commit(int n) = 0;

 protected:
  int offset_;
};

class SpeculativeKvCache final : public SpeculativeLayer {
 public:
  explicit SpeculativeKvCache(KVCache* target);
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  KvView State() const override { return target_->State(); }
  void Commit(int n) override;

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
  void Commit(int) override {}

 private:
  const KVCache* target_;
  BlockStore drafts_;  // the drafted tokens, [0, Offset() - target offset)
};

class SpeculativeRotatingKvCache final : public SpeculativeLayer {
 public:
  explicit SpeculativeRotatingKvCache(RotatingKVCache* target);
  KVHistory Update(const Tensor& keys, const Tensor& values) override;
  KvView State() const override;
  void Commit(int n) override;

 private:
  RotatingKVCache* target_;
  BlockStore drafts_;
};

}  // namespace ringkv::detail
