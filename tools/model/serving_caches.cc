#include "serving_caches.h"

#include <fmt/format.h>

#include <gsl/assert>
#include <gsl/narrow>
#include <vector>

#include "ringkv/error.h"

namespace ringkv::model {
namespace {

std::unique_ptr<CausalCache> MakePool(const ModelConfig& config, const ServingCachesOptions& o,
                                      LayerKind kind) {
  int layers = 0;
  for (int i = 0; i < config.layers; ++i) layers += config.KindOf(i) == kind ? 1 : 0;
  if (layers == 0) return nullptr;
  CausalCacheOptions c;
  c.layers = layers;
  c.kv_heads = config.kv_heads;
  c.key_dim = config.head_dim;
  c.value_dim = config.head_dim;
  c.dtype = PoolDtype(config.kv_dtype);
  c.capacity_tokens = o.capacity_tokens;
  c.block_tokens = o.block_tokens;
  c.max_sequences = o.max_sequences;
  c.max_batch = o.max_batch;
  if (kind == LayerKind::kSliding) {
    if (config.window < 2) {
      throw Error(fmt::format(
          "[ServingCaches] window {} cannot be served from a CausalCache: its window w shows the "
          "query and w earlier tokens, and w = 0 means no window (use a window >= 2)",
          config.window));
    }
    c.window = config.window - 1;
  }
  return std::make_unique<CausalCache>(std::move(c));
}

// Blocks the sequence's held tokens would fill on their own.
std::size_t SeparateBytesOf(const CausalCache* pool) {
  if (pool == nullptr) return 0;
  const auto block = gsl::narrow<std::size_t>(pool->Options().block_tokens);
  std::size_t blocks = 0;
  for (const SequenceId seq : pool->Sequences()) {
    blocks += (pool->SequencePositions(seq).size() + block - 1) / block;
  }
  return blocks * pool->BytesPerBlock();
}

std::size_t UsedBytesOf(const CausalCache* pool) {
  return pool == nullptr ? 0 : gsl::narrow<std::size_t>(pool->UsedBlocks()) * pool->BytesPerBlock();
}

}  // namespace

DType PoolDtype(DType kv_dtype) noexcept { return kv_dtype; }

ServingCaches::ServingCaches(const ModelConfig& config, const ServingCachesOptions& options)
    : config_(config),
      global_(MakePool(config, options, LayerKind::kGlobal)),
      sliding_(MakePool(config, options, LayerKind::kSliding)) {}

CausalCache* ServingCaches::Pool(LayerKind kind) const noexcept {
  return kind == LayerKind::kGlobal ? global_.get() : sliding_.get();
}

CausalCache& ServingCaches::PoolOf(int layer) const {
  CausalCache* pool = Pool(config_.KindOf(layer));
  Expects(pool != nullptr);
  return *pool;
}

int ServingCaches::IndexInPool(int layer) const {
  const LayerKind kind = config_.KindOf(layer);
  int index = 0;
  for (int i = 0; i < layer; ++i) index += config_.KindOf(i) == kind ? 1 : 0;
  return index;
}

void ServingCaches::StartForward(const Batch& batch) {
  if (global_ == nullptr || sliding_ == nullptr) {
    (global_ != nullptr ? global_ : sliding_)->StartForward(batch);
    return;
  }
  const std::unique_ptr<SequenceCache::State> before = global_->SaveState();
  global_->StartForward(batch);
  try {
    sliding_->StartForward(batch);
  } catch (...) {
    global_->RestoreState(*before);
    throw;
  }
}

void ServingCaches::CopyPrefix(SequenceId src, SequenceId dst, Position len) {
  if (global_ == nullptr || sliding_ == nullptr) {
    (global_ != nullptr ? global_ : sliding_)->CopyPrefix(src, dst, len);
    return;
  }
  const std::unique_ptr<SequenceCache::State> before = global_->SaveState();
  global_->CopyPrefix(src, dst, len);
  try {
    sliding_->CopyPrefix(src, dst, len);
  } catch (...) {
    global_->RestoreState(*before);
    throw;
  }
}

std::size_t ServingCaches::UsedBytes() const {
  return UsedBytesOf(global_.get()) + UsedBytesOf(sliding_.get());
}

std::size_t ServingCaches::SeparateBytes() const {
  return SeparateBytesOf(global_.get()) + SeparateBytesOf(sliding_.get());
}

}  // namespace ringkv::model
