#include "ringkv/wrapper_cache.h"

#include <fmt/format.h>

#include <gsl/assert>
#include <utility>

#include "ringkv/error.h"

namespace ringkv {
namespace {

// The wrapper's identity for its states: a token only it holds (states keep it
// alive, so no later wrapper can have the same one).
using Identity = std::shared_ptr<const char>;

class WrapperState final : public SequenceCache::State {
 public:
  WrapperState(Identity owner, std::vector<std::unique_ptr<SequenceCache::State>> states,
               std::size_t type)
      : owner_(std::move(owner)), states_(std::move(states)), type_(type) {}
  const char* Owner() const noexcept { return owner_.get(); }
  const std::vector<std::unique_ptr<SequenceCache::State>>& States() const noexcept {
    return states_;
  }
  std::size_t Type() const noexcept { return type_; }

 private:
  Identity owner_;
  std::vector<std::unique_ptr<SequenceCache::State>> states_;  // one per wrapped cache
  std::size_t type_;
};

}  // namespace

struct WrapperCache::Impl {
  std::vector<SequenceCache*> caches;
  std::size_t type = 0;  // the cache Update and Get use
  Identity identity = std::make_shared<const char>('w');

  // Runs op on every cache in order. When one throws, the caches before it are
  // put back from states saved just before their call (the failing one changed
  // nothing: every SequenceCache call is all or nothing), and the error goes on.
  template <class Op>
  void OnEvery(Op&& op) {
    std::vector<std::unique_ptr<State>> saved;
    saved.reserve(caches.size());
    std::size_t i = 0;
    try {
      for (; i < caches.size(); ++i) {
        // The last cache needs no state: nothing after it can fail.
        if (i + 1 < caches.size()) saved.push_back(caches[i]->SaveState());
        op(*caches[i]);
      }
    } catch (...) {
      for (std::size_t j = i; j-- > 0;) caches[j]->RestoreState(*saved[j]);
      throw;
    }
  }
};

WrapperCache::WrapperCache(std::span<SequenceCache* const> caches)
    : impl_(std::make_unique<Impl>()) {
  if (caches.empty()) throw Error("[WrapperCache] the list of caches is empty");
  for (std::size_t i = 0; i < caches.size(); ++i) {
    if (caches[i] == nullptr) throw Error(fmt::format("[WrapperCache] caches[{}] is null", i));
    for (std::size_t j = 0; j < i; ++j) {
      if (caches[j] == caches[i]) {
        throw Error(fmt::format("[WrapperCache] caches[{}] is the same cache as caches[{}]", i, j));
      }
    }
  }
  impl_->caches.assign(caches.begin(), caches.end());
}

WrapperCache::~WrapperCache() = default;

void WrapperCache::SetLayerType(std::size_t type) {
  if (type >= impl_->caches.size()) {
    throw Error(fmt::format("[WrapperCache::SetLayerType] type {} is out of range for {} caches",
                            type, impl_->caches.size()));
  }
  impl_->type = type;
}

SequenceCache& WrapperCache::UnderlyingCache() const noexcept {
  return *impl_->caches[impl_->type];
}

void WrapperCache::StartForward(const Batch& batch, ForwardMode mode) {
  impl_->OnEvery([&](SequenceCache& cache) { cache.StartForward(batch, mode); });
  impl_->type = 0;
}

void WrapperCache::SetNonCausalRows(std::span<const std::int64_t> rows) {
  impl_->OnEvery([&](SequenceCache& cache) { cache.SetNonCausalRows(rows); });
}

BatchHistory WrapperCache::Update(int layer, const Tensor& keys, const Tensor& values) {
  return UnderlyingCache().Update(layer, keys, values);
}

BatchHistory WrapperCache::Get(int layer) const { return UnderlyingCache().Get(layer); }

void WrapperCache::CopyPrefix(SequenceId src, SequenceId dst, Position len) {
  impl_->OnEvery([&](SequenceCache& cache) { cache.CopyPrefix(src, dst, len); });
}

bool WrapperCache::CanResume(SequenceId seq, Position pos) const {
  for (const SequenceCache* cache : impl_->caches) {
    if (!cache->CanResume(seq, pos)) return false;
  }
  return true;
}

void WrapperCache::Remove(SequenceId seq, Position begin, Position end) {
  impl_->OnEvery([&](SequenceCache& cache) { cache.Remove(seq, begin, end); });
}

std::unique_ptr<SequenceCache::State> WrapperCache::SaveState() const {
  std::vector<std::unique_ptr<State>> states;
  states.reserve(impl_->caches.size());
  for (const SequenceCache* cache : impl_->caches) states.push_back(cache->SaveState());
  return std::make_unique<WrapperState>(impl_->identity, std::move(states), impl_->type);
}

void WrapperCache::RestoreState(const State& state) {
  const auto* saved = dynamic_cast<const WrapperState*>(&state);
  if (saved == nullptr || saved->Owner() != impl_->identity.get()) {
    throw Error(
        "[WrapperCache::RestoreState] the state was not saved by this wrapper (a state restores "
        "only into the cache that saved it)");
  }
  Expects(saved->States().size() == impl_->caches.size());
  std::size_t i = 0;
  impl_->OnEvery([&](SequenceCache& cache) { cache.RestoreState(*saved->States()[i++]); });
  impl_->type = saved->Type();
}

}  // namespace ringkv
