#include "ringkv/speculation.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/narrow>

#include "kv_input.h"
#include "ringkv/error.h"
#include "speculative_caches.h"

namespace ringkv {
namespace detail {
namespace {

const KvLayout* Established(const BlockStore& drafts, const BlockStore& live) {
  if (drafts.HasLayout()) return &drafts.Layout();
  return live.HasLayout() ? &live.Layout() : nullptr;
}

// Validates and appends drafted tokens to `drafts`.
int Record(const char* function, BlockStore& drafts, const BlockStore& live, const Tensor& keys,
           const Tensor& values) {
  const KvLayout layout = CheckKvInput(function, keys, values, Established(drafts, live));
  if (!drafts.HasLayout()) drafts.SetLayout(layout);
  drafts.Append(keys, values);
  return gsl::narrow<int>(keys.Dim(2));
}

}  // namespace

SpeculativeKvCache::SpeculativeKvCache(KVCache* target)
    : SpeculativeLayer(target->Offset()),
      target_(target),
      start_(target->Offset()),
      end_(target->Offset()) {}

KVHistory SpeculativeKvCache::Update(const Tensor& keys, const Tensor& values) {
  KVHistory history = target_->Update(keys, values);
  offset_ = target_->Offset();
  end_ = target_->Offset();
  return history;
}

void SpeculativeKvCache::Commit(int n) {
  const int target = std::min(std::max(start_, start_ + n), end_);
  const bool rewound = target_->Restore(nullptr, target);
  Expects(rewound);
  offset_ = target;
}

IsolatedKvCache::IsolatedKvCache(const KVCache* target)
    : SpeculativeLayer(target->Offset()), target_(target), drafts_(target->BlockTokens()) {}

KVHistory IsolatedKvCache::Update(const Tensor& keys, const Tensor& values) {
  offset_ += Record("KVCache speculation Update", drafts_, *target_->store_, keys, values);
  return KVHistory(State(), MaskApplier{MaskApplier::Kind::kIdentity, keys.Dim(2), offset_, 0, 0});
}

KvView IsolatedKvCache::State() const {
  KvView view = target_->State();
  if (drafts_.Length() > 0) view.AddRange(&drafts_, 0, drafts_.Length());
  return view;
}

SpeculativeRotatingKvCache::SpeculativeRotatingKvCache(RotatingKVCache* target)
    : SpeculativeLayer(target->Offset()), target_(target), drafts_(target->store_->BlockTokens()) {}

KVHistory SpeculativeRotatingKvCache::Update(const Tensor& keys, const Tensor& values) {
  offset_ += Record("RotatingKVCache speculation Update", drafts_, *target_->store_, keys, values);
  KvView view = target_->LogicalTail(target_->MaxSize() - 1);
  view.AddRange(&drafts_, 0, drafts_.Length());
  // Logical order: the window applies as a plain sliding-window mask.
  return KVHistory(view, MaskApplier{MaskApplier::Kind::kLogicalSliding, keys.Dim(2), view.Length(),
                                     target_->MaxSize(), 0, offset_ - view.Length()});
}

KvView SpeculativeRotatingKvCache::State() const {
  if (drafts_.Length() == 0) return target_->State();
  KvView view = target_->LogicalTail(target_->MaxSize() - 1);
  view.AddRange(&drafts_, 0, drafts_.Length());
  return view;
}

void SpeculativeRotatingKvCache::Commit(int n) {
  if (drafts_.Length() == 0 || n <= 0) return;
  const std::int64_t count = std::min<std::int64_t>(n, drafts_.Length());
  KvView accepted;
  accepted.AddRange(&drafts_, 0, count);
  // Through the normal write path: decode for one token, concat for more.
  target_->Update(accepted.ConcatKeys(), accepted.ConcatValues());
}

}  // namespace detail

Speculation::Speculation() = default;
Speculation::Speculation(Speculation&&) noexcept = default;
Speculation& Speculation::operator=(Speculation&&) noexcept = default;
Speculation::~Speculation() = default;

void Speculation::Commit(int n) {
  for (const auto& layer : layers_) {
    if (layer != nullptr) layer->Commit(n);
  }
}

namespace {

// Wraps one cache; the rotating kind is checked first.
template <class MakeRotating, class MakePlain>
std::unique_ptr<detail::SpeculativeLayer> Wrap(const char* function, std::size_t index,
                                               AttentionCache* cache, MakeRotating make_rotating,
                                               MakePlain make_plain) {
  if (cache == nullptr) return nullptr;
  if (auto* ring = dynamic_cast<RotatingKVCache*>(cache)) return make_rotating(ring);
  if (auto* plain = dynamic_cast<KVCache*>(cache)) return make_plain(plain);
  throw Error(
      fmt::format("[{}] cache {} is neither a KVCache nor a RotatingKVCache", function, index));
}

}  // namespace

Speculation BeginSpeculation(std::span<AttentionCache* const> caches) {
  Speculation speculation;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    speculation.layers_.push_back(Wrap(
        "BeginSpeculation", i, caches[i],
        [](RotatingKVCache* c) { return std::make_unique<detail::SpeculativeRotatingKvCache>(c); },
        [](KVCache* c) { return std::make_unique<detail::SpeculativeKvCache>(c); }));
    speculation.views_.push_back(speculation.layers_.back().get());
  }
  return speculation;
}

std::vector<std::unique_ptr<AttentionCache>> BeginIsolatedSpeculation(
    std::span<AttentionCache* const> caches) {
  std::vector<std::unique_ptr<AttentionCache>> wrappers;
  for (std::size_t i = 0; i < caches.size(); ++i) {
    wrappers.push_back(Wrap(
        "BeginIsolatedSpeculation", i, caches[i],
        [](RotatingKVCache* c) { return std::make_unique<detail::SpeculativeRotatingKvCache>(c); },
        [](KVCache* c) { return std::make_unique<detail::IsolatedKvCache>(c); }));
  }
  return wrappers;
}

}  // namespace ringkv
