#include "ringkv/encoder_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <gsl/assert>
#include <gsl/narrow>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "../cache/block_store.h"
#include "../cache/kv_input.h"
#include "batch_plan.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

// One layer's encoder output for one sequence. Never written after it is made:
// a new encoder input replaces it, so sequences and saved states share it freely.
struct LayerKv {
  Tensor keys;    // [1, Hkv, Te, D], the cache's dtype, contiguous
  Tensor values;  // [1, Hkv, Te, Dv]
};

// What one sequence holds: the encoder input's position and its K/V per layer.
struct Encoded {
  Position position = 0;
  std::map<int, std::shared_ptr<const LayerKv>> layers;
};

// The current forward pass.
struct Pass {
  std::vector<Position> positions;    // [N]
  std::vector<SequenceId> sequences;  // [N]
  ForwardMode mode = ForwardMode::kStore;
  bool has_encoder = false;  // SetEncoderRows named rows
  SequenceId encoder_seq = 0;
  Position encoder_pos = 0;
  bool stored = false;  // an Update of this pass already replaced encoder_seq's entry
};

struct Contents {
  std::map<SequenceId, Encoded> sequences;
  Pass pass;
};

}  // namespace

struct EncoderCache::Impl {
  DType dtype;
  Contents contents;
  // Bumped by every call that changes what the pass's rows see, except Update
  // (histories keep the K/V they read alive). Also the cache's identity for states.
  std::shared_ptr<detail::ViewEpoch> epoch = std::make_shared<detail::ViewEpoch>();

  void Invalidate() noexcept { ++epoch->generation; }

  // The layout every sequence but `except` holds for `layer`, if any does.
  std::optional<detail::KvLayout> LayerLayout(int layer, const SequenceId* except) const {
    for (const auto& [seq, encoded] : contents.sequences) {
      if (except != nullptr && seq == *except) continue;
      const auto it = encoded.layers.find(layer);
      if (it == encoded.layers.end()) continue;
      const LayerKv& kv = *it->second;
      return detail::KvLayout{dtype, dtype, kv.keys.Dim(1), kv.keys.Dim(3), kv.values.Dim(3)};
    }
    return std::nullopt;
  }

  BatchHistory Get(int layer) const;
};

namespace {

class EncoderState final : public SequenceCache::State {
 public:
  EncoderState(std::shared_ptr<const detail::ViewEpoch> owner, Contents contents)
      : owner_(std::move(owner)), contents_(std::move(contents)) {}
  const detail::ViewEpoch* Owner() const noexcept { return owner_.get(); }
  const Contents& Saved() const noexcept { return contents_; }

 private:
  std::shared_ptr<const detail::ViewEpoch> owner_;
  Contents contents_;
};

void CheckLayer(const char* function, int layer) {
  if (layer < 0) throw Error(fmt::format("[{}] layer {} is negative", function, layer));
}

}  // namespace

BatchHistory EncoderCache::Impl::Get(int layer) const {
  const Pass& pass = contents.pass;
  const auto rows = gsl::narrow<std::int64_t>(pass.sequences.size());
  if (rows == 0) return BatchHistory();
  auto plan = std::make_shared<detail::BatchPlan>();
  plan->key_dtype = dtype;
  plan->value_dtype = dtype;
  plan->rows = rows;
  if (const std::optional<detail::KvLayout> layout = LayerLayout(layer, nullptr)) {
    plan->heads = layout->heads;
    plan->key_dim = layout->k_dim;
    plan->value_dim = layout->v_dim;
  }
  plan->row_lo.assign(static_cast<std::size_t>(rows), 0);
  plan->row_hi.assign(static_cast<std::size_t>(rows), 0);
  auto held = std::make_shared<std::vector<std::shared_ptr<const LayerKv>>>();

  // One group per sequence of the pass that holds this layer: every one of its
  // rows sees all Te encoder keys.
  std::vector<SequenceId> seen;
  for (std::size_t i = 0; i < pass.sequences.size(); ++i) {
    const SequenceId seq = pass.sequences[i];
    if (std::find(seen.begin(), seen.end(), seq) != seen.end()) continue;
    seen.push_back(seq);
    const auto found = contents.sequences.find(seq);
    if (found == contents.sequences.end()) continue;
    const auto layer_kv = found->second.layers.find(layer);
    if (layer_kv == found->second.layers.end()) continue;
    const LayerKv& kv = *layer_kv->second;
    held->push_back(layer_kv->second);
    const std::int64_t count = kv.keys.Dim(2);
    kernels::RaggedRun run;
    run.k = kv.keys.Data();
    run.v = kv.values.Data();
    run.count = count;
    run.k_head_stride = kv.keys.Stride(1);
    run.k_row_stride = kv.keys.Stride(2);
    run.v_head_stride = kv.values.Stride(1);
    run.v_row_stride = kv.values.Stride(2);
    kernels::RaggedGroup group;
    group.first_row = gsl::narrow<std::int64_t>(plan->group_rows.size());
    group.first_run = gsl::narrow<std::int64_t>(plan->runs.size());
    group.run_count = 1;
    for (std::size_t r = i; r < pass.sequences.size(); ++r) {
      if (pass.sequences[r] != seq) continue;
      plan->group_rows.push_back(gsl::narrow<std::int64_t>(r));
      plan->row_hi[r] = count;
    }
    group.row_count = gsl::narrow<std::int64_t>(plan->group_rows.size()) - group.first_row;
    plan->runs.push_back(run);
    plan->groups.push_back(group);
  }
  plan->epoch = epoch;
  plan->generation = epoch->generation;
  plan->storage = std::move(held);
  return detail::BatchAccess::Make(std::move(plan), 0, 0);
}

EncoderCache::EncoderCache(DType dtype) : impl_(std::make_unique<Impl>()) {
  impl_->dtype = *detail::CheckStorageDtype("EncoderCache", dtype);
}

EncoderCache::~EncoderCache() = default;
// SequenceCache is not copyable, so the moves are spelled out.
EncoderCache::EncoderCache(EncoderCache&& other) noexcept : impl_(std::move(other.impl_)) {}
EncoderCache& EncoderCache::operator=(EncoderCache&& other) noexcept {
  impl_ = std::move(other.impl_);
  return *this;
}

void EncoderCache::StartForward(const Batch& batch, ForwardMode mode) {
  constexpr const char* kFn = "EncoderCache::StartForward";
  if (batch.positions.size() != batch.sequences.size()) {
    throw Error(fmt::format("[{}] batch.positions has {} entries but batch.sequences has {}", kFn,
                            batch.positions.size(), batch.sequences.size()));
  }
  if (mode != ForwardMode::kStore && mode != ForwardMode::kReserve) {
    throw Error(fmt::format("[{}] mode {} is not kStore or kReserve", kFn, static_cast<int>(mode)));
  }
  Pass pass;
  pass.positions.assign(batch.positions.begin(), batch.positions.end());
  pass.sequences.assign(batch.sequences.begin(), batch.sequences.end());
  pass.mode = mode;
  impl_->contents.pass = std::move(pass);
  impl_->Invalidate();
}

void EncoderCache::SetEncoderRows(std::span<const std::int64_t> rows) {
  constexpr const char* kFn = "EncoderCache::SetEncoderRows";
  const Pass& pass = impl_->contents.pass;
  const auto n = gsl::narrow<std::int64_t>(pass.sequences.size());
  std::int64_t last = -1;
  for (const std::int64_t row : rows) {
    if (row < 0 || row >= n) {
      throw Error(fmt::format("[{}] row {} is outside the pass's {} rows [0, {})", kFn, row, n, n));
    }
    if (last >= 0 && pass.sequences[static_cast<std::size_t>(row)] !=
                         pass.sequences[static_cast<std::size_t>(last)]) {
      throw Error(fmt::format(
          "[{}] rows {} (sequence {}) and {} (sequence {}) are encoder inputs of different "
          "sequences; one pass stores one encoder output",
          kFn, last, pass.sequences[static_cast<std::size_t>(last)], row,
          pass.sequences[static_cast<std::size_t>(row)]));
    }
    last = std::max(last, row);
  }
  Pass& mutable_pass = impl_->contents.pass;
  mutable_pass.has_encoder = last >= 0;
  mutable_pass.stored = false;
  if (last >= 0) {
    mutable_pass.encoder_seq = pass.sequences[static_cast<std::size_t>(last)];
    mutable_pass.encoder_pos = pass.positions[static_cast<std::size_t>(last)];
  }
}

void EncoderCache::SetNonCausalRows(std::span<const std::int64_t> /*rows*/) {}

BatchHistory EncoderCache::Update(int layer, const Tensor& keys, const Tensor& values) {
  constexpr const char* kFn = "EncoderCache::Update";
  CheckLayer(kFn, layer);
  Pass& pass = impl_->contents.pass;
  const bool store = pass.has_encoder && pass.mode == ForwardMode::kStore;
  const SequenceId* target = store ? &pass.encoder_seq : nullptr;
  const std::optional<detail::KvLayout> established = impl_->LayerLayout(layer, target);
  detail::CheckKvInput(kFn, keys, values, established ? &*established : nullptr,
                       KvStorage::Same(impl_->dtype));
  if (!store) return impl_->Get(layer);

  // The one copy, converting to the cache's dtype; then nothing below throws but
  // the map insertions, which leave the old entry in place.
  auto kv =
      std::make_shared<LayerKv>(LayerKv{keys.AsType(impl_->dtype), values.AsType(impl_->dtype)});
  Encoded encoded;
  if (pass.stored) encoded = impl_->contents.sequences.at(pass.encoder_seq);
  encoded.position = pass.encoder_pos;
  encoded.layers[layer] = std::move(kv);
  impl_->contents.sequences[pass.encoder_seq] = std::move(encoded);
  pass.stored = true;
  return impl_->Get(layer);
}

BatchHistory EncoderCache::Get(int layer) const {
  CheckLayer("EncoderCache::Get", layer);
  return impl_->Get(layer);
}

void EncoderCache::CopyPrefix(SequenceId src, SequenceId dst, Position len) {
  if (len < 0) {
    throw Error(fmt::format("[EncoderCache::CopyPrefix] len {} is negative", len));
  }
  std::map<SequenceId, Encoded>& sequences = impl_->contents.sequences;
  const auto found = sequences.find(src);
  std::optional<Encoded> copied;
  if (found != sequences.end() && found->second.position < len) copied = found->second;
  if (copied) {
    sequences[dst] = std::move(*copied);  // shares the K/V
  } else {
    sequences.erase(dst);
  }
  impl_->Invalidate();
}

bool EncoderCache::CanResume(SequenceId /*seq*/, Position /*pos*/) const { return true; }

void EncoderCache::Remove(SequenceId seq, Position begin, Position end) {
  if (begin < 0 || end < begin) {
    throw Error(fmt::format(
        "[EncoderCache::Remove] range [{}, {}) of sequence {} is not a range of positions >= 0",
        begin, end, seq));
  }
  std::map<SequenceId, Encoded>& sequences = impl_->contents.sequences;
  const auto found = sequences.find(seq);
  if (found != sequences.end()) {
    Position& position = found->second.position;
    if (position >= begin && position < end) {
      sequences.erase(found);
    } else if (end != kEndOfSequence && position >= end) {
      position -= end - begin;  // the decoder's tokens after the range move down with it
    }
  }
  impl_->Invalidate();
}

std::unique_ptr<SequenceCache::State> EncoderCache::SaveState() const {
  return std::make_unique<EncoderState>(impl_->epoch, impl_->contents);
}

void EncoderCache::RestoreState(const State& state) {
  const auto* saved = dynamic_cast<const EncoderState*>(&state);
  if (saved == nullptr || saved->Owner() != impl_->epoch.get()) {
    throw Error(
        "[EncoderCache::RestoreState] the state was not saved by this cache (a state restores "
        "only into the cache that saved it)");
  }
  Contents restored = saved->Saved();  // the copy that may throw, before anything changes
  impl_->contents = std::move(restored);
  impl_->Invalidate();
}

bool EncoderCache::EncoderCached(SequenceId seq) const noexcept {
  return impl_->contents.sequences.contains(seq);
}

}  // namespace ringkv
