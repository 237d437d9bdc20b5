#include "ringkv/speculation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>
#include <optional>
#include <string>

#include "kv_access.h"
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

// Validates and appends drafted tokens to `drafts` (in the live cache's storage dtype).
int Record(const char* function, BlockStore& drafts, const BlockStore& live,
           std::optional<KvStorage> storage, const Tensor& keys, const Tensor& values) {
  const KvLayout layout = CheckKvInput(function, keys, values, Established(drafts, live), storage);
  if (!drafts.HasLayout()) drafts.SetLayout(layout);
  drafts.Append(keys, values);
  return gsl::narrow<int>(keys.Dim(2));
}

}  // namespace

bool SpeculativeLayer::Restore(const ringkv::Snapshot* /*snapshot*/, int target) {
  CheckTarget("speculation wrapper Restore", target);
  return false;
}

void SpeculativeLayer::CheckDraft(const char* function, const Tensor& keys) const {
  if (closed_) {
    throw Error(fmt::format("[{}] the speculation was committed: its wrappers take no more drafts",
                            function));
  }
  // The shape itself is checked by the write that follows.
  if (keys.Rank() == 4) (void)AdvancedOffset(function, offset_, keys.Dim(2));
}

SpeculativeKvCache::SpeculativeKvCache(KVCache* target)
    : SpeculativeLayer(target->Offset()),
      target_(target),
      start_(target->Offset()),
      end_(target->Offset()) {}

KVHistory SpeculativeKvCache::Update(const Tensor& keys, const Tensor& values) {
  CheckDraft("KVCache speculation Update", keys);
  KVHistory history = target_->Update(keys, values);
  offset_ = target_->Offset();
  end_ = target_->Offset();
  return history;
}

void SpeculativeKvCache::Commit(int n) {
  Expects(n >= 0 && n <= Drafted());
  const int target = start_ + n;  // <= end_: no overflow
  const bool rewound = target_->Restore(nullptr, target);
  Expects(rewound);
  offset_ = target;
}

void SpeculativeKvCache::Rollback() noexcept {
  if (target_->Offset() <= start_) return;  // nothing drafted
  const bool rewound = target_->Restore(nullptr, start_);
  Expects(rewound);
  offset_ = end_ = start_;
}

IsolatedKvCache::IsolatedKvCache(const KVCache* target)
    : SpeculativeLayer(target->Offset()), target_(target), drafts_(target->BlockTokens()) {}

KVHistory IsolatedKvCache::Update(const Tensor& keys, const Tensor& values) {
  CheckDraft("KVCache speculation Update", keys);
  offset_ += Record("KVCache speculation Update", drafts_, *target_->store_, target_->Storage(),
                    keys, values);
  return detail::MakeHistory(State(), detail::MaskApplier{detail::MaskApplier::Kind::kIdentity,
                                                          keys.Dim(2), offset_, 0, 0});
}

KvView IsolatedKvCache::State() const {
  KvView view = target_->State();
  if (drafts_.Length() > 0) detail::AddRange(view, &drafts_, 0, drafts_.Length());
  return view;
}

SpeculativeRotatingKvCache::SpeculativeRotatingKvCache(RotatingKVCache* target)
    : SpeculativeLayer(target->Offset()), target_(target), drafts_(target->store_->BlockTokens()) {}

KVHistory SpeculativeRotatingKvCache::Update(const Tensor& keys, const Tensor& values) {
  CheckDraft("RotatingKVCache speculation Update", keys);
  offset_ += Record("RotatingKVCache speculation Update", drafts_, *target_->store_,
                    target_->Storage(), keys, values);
  KvView view = target_->LogicalTail(target_->MaxSize() - 1);
  detail::AddRange(view, &drafts_, 0, drafts_.Length());
  // Logical order: the window applies as a window-only mask (future keys stay as the caller says).
  return detail::MakeHistory(
      view, detail::MaskApplier{detail::MaskApplier::Kind::kLogicalSliding, keys.Dim(2),
                                view.Length(), target_->MaxSize(), 0, offset_ - view.Length()});
}

KvView SpeculativeRotatingKvCache::State() const {
  if (drafts_.Length() == 0) return target_->State();
  KvView view = target_->LogicalTail(target_->MaxSize() - 1);
  detail::AddRange(view, &drafts_, 0, drafts_.Length());
  return view;
}

void SpeculativeRotatingKvCache::Commit(int n) {
  Expects(n >= 0 && n <= Drafted());
  if (n == 0) return;
  KvView accepted;
  detail::AddRange(accepted, &drafts_, 0, n);
  // Through the normal write path: decode for one token, concat for more.
  target_->Update(accepted.ConcatKeys(), accepted.ConcatValues());
}

}  // namespace detail

Speculation::Speculation() = default;

Speculation::Speculation(Speculation&& other) noexcept
    : layers_(std::move(other.layers_)), views_(std::move(other.views_)), open_(other.open_) {
  other.layers_.clear();
  other.views_.clear();
  other.open_ = false;
}

Speculation& Speculation::operator=(Speculation&& other) noexcept {
  if (this == &other) return *this;
  Rollback();
  layers_ = std::move(other.layers_);
  views_ = std::move(other.views_);
  open_ = other.open_;
  other.layers_.clear();
  other.views_.clear();
  other.open_ = false;
  return *this;
}

Speculation::~Speculation() { Rollback(); }

void Speculation::Rollback() noexcept {
  if (!open_) return;
  for (const auto& layer : layers_) {
    if (layer != nullptr) layer->Rollback();
  }
  open_ = false;
}

void Speculation::Commit(int n) {
  if (!open_) {
    throw Error(
        "[Speculation::Commit] the speculation was already committed (or moved from): a second "
        "Commit would append the drafts again");
  }
  std::vector<std::string> drafted;
  int common = -1;
  bool uneven = false;
  for (const auto& layer : layers_) {
    if (layer == nullptr) {
      drafted.emplace_back("-");
      continue;
    }
    drafted.push_back(std::to_string(layer->Drafted()));
    uneven = uneven || (common >= 0 && layer->Drafted() != common);
    common = layer->Drafted();
  }
  if (uneven) {
    throw Error(fmt::format(
        "[Speculation::Commit] the layers drafted different numbers of tokens (drafted tokens "
        "per layer [{}]): the forward did not reach every layer; let the speculation go to roll "
        "it back",
        fmt::join(drafted, ", ")));
  }
  const int accepted = std::clamp(n, 0, std::max(common, 0));
  // The buffered (rotating) layers first: their appends allocate and may throw,
  // the write-through rewinds cannot.
  for (const bool write_through : {false, true}) {
    for (const auto& layer : layers_) {
      if (layer != nullptr && layer->WritesThrough() == write_through) layer->Commit(accepted);
    }
  }
  for (const auto& layer : layers_) {
    if (layer != nullptr) layer->Close();
  }
  open_ = false;
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

// The wrappers of one forward must all start at one offset (the positions come from it).
void CheckOneOffset(const char* function, std::span<AttentionCache* const> caches) {
  std::vector<std::string> offsets;
  int common = -1;
  bool mixed = false;
  for (const AttentionCache* cache : caches) {
    if (cache == nullptr) {
      offsets.emplace_back("-");
      continue;
    }
    offsets.push_back(std::to_string(cache->Offset()));
    mixed = mixed || (common >= 0 && cache->Offset() != common);
    common = cache->Offset();
  }
  if (mixed) {
    throw Error(fmt::format("[{}] the caches are at different offsets: [{}]", function,
                            fmt::join(offsets, ", ")));
  }
}

}  // namespace

Speculation BeginSpeculation(std::span<AttentionCache* const> caches) {
  CheckOneOffset("BeginSpeculation", caches);
  Speculation speculation;
  speculation.open_ = true;
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
  CheckOneOffset("BeginIsolatedSpeculation", caches);
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
