// SaveCaches: every layer's kind, block size and state (a snapshot from offset
// 0) to a caches file, with the caller's tokens and metadata (caches_format.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "caches_format.h"
#include "file_frame.h"
#include "file_layer.h"
#include "file_tensors.h"
#include "metadata_file_write.h"
#include "ringkv/cache_file.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

constexpr const char* kFn = "SaveCaches";

int CheckedOffset(const LayerCaches& caches) {
  const std::vector<int> offsets = caches.Offsets();
  for (const int offset : offsets) {
    if (offset != offsets.front()) {
      throw Error(fmt::format("[{}] caches: the layers are at different offsets [{}]", kFn,
                              fmt::join(offsets, ", ")));
    }
  }
  return offsets.empty() ? 0 : offsets.front();
}

// A layer's kind, block size, layout and state; its K/V go to `writer`.
detail::json LayerJson(const AttentionCache& cache, std::size_t l, detail::TensorWriter& writer,
                       std::uint64_t& slack) {
  detail::json layer;
  std::int64_t block_tokens = 0;
  std::optional<DType> storage_dtype;
  if (const auto* ring = dynamic_cast<const RotatingKVCache*>(&cache)) {
    block_tokens = ring->BlockTokens();
    storage_dtype = ring->StorageDtype();
    layer = {{"kind", "sliding"}, {"window", ring->MaxSize()}};
  } else {
    const auto& full = dynamic_cast<const KVCache&>(cache);
    block_tokens = full.BlockTokens();
    storage_dtype = full.StorageDtype();
    layer = {{"kind", "global"}};
  }
  if (const std::optional<KvStorage> storage = cache.Storage();
      storage.has_value() && (IsQuantized(storage->keys) || IsQuantized(storage->values))) {
    throw Error(fmt::format(
        "[{}] layer {} stores keys as {} and values as {}: cache files do not hold quantized "
        "(int8 / int4) layers yet (docs/cache_file.md); nothing was written",
        kFn, l, storage->keys, storage->values));
  }
  layer["block_tokens"] = block_tokens;
  layer["storage_dtype"] = storage_dtype.has_value()
                               ? detail::json(detail::SafetensorsDType(*storage_dtype))
                               : detail::json(nullptr);
  const std::unique_ptr<Snapshot> state = cache.Snapshot(0);
  const std::optional<detail::KvLayout> layout = detail::LayoutOf(state.get());
  layer["kv"] = detail::LayoutJson(layout);
  layer["state"] = state == nullptr ? detail::json(nullptr)
                                    : detail::EncodeLayer(*state, fmt::format("l{}", l), writer);
  if (layout.has_value()) {
    const std::int64_t slots = writer.tensors.back().Dim(2);
    const std::uint64_t bytes = detail::SlackBytes(slots, block_tokens, layout->BytesPerToken());
    slack = bytes > UINT64_MAX - slack ? UINT64_MAX : slack + bytes;
  }
  return layer;
}

}  // namespace

void SaveCaches(const std::string& path, const LayerCaches& caches, std::span<const int> tokens,
                const std::map<std::string, std::string>& metadata) {
  const int offset = CheckedOffset(caches);
  detail::CheckUserMetadata(kFn, metadata);
  detail::TensorWriter writer;
  detail::json layers = detail::json::array();
  std::uint64_t slack = 0;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    layers.push_back(LayerJson(caches[l], l, writer, slack));
  }
  // What LoadCaches would refuse is never written.
  if (slack > detail::kMaxSlackBytes) {
    throw Error(fmt::format(
        "[{}] caches: their blocks hold {} bytes beyond their tokens, over the limit of {} that "
        "LoadCaches accepts (blocks far larger than the tokens in them)",
        kFn, slack, detail::kMaxSlackBytes));
  }
  detail::WriteMetadataFile(
      path,
      {detail::kCachesFormat, detail::kCachesVersion, detail::kCachesHeaderLimit, "LoadCaches"},
      detail::json{{"offset", offset}, {"layers", layers}}, tokens, metadata, writer, kFn);
}

}  // namespace ringkv
