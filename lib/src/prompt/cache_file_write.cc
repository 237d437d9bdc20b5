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

// The cache's storage dtypes: a float one by its safetensors name (as files
// before quantized layers), quantized ones per side as {"keys": "int8",
// "values": "int4"}, or null when the cache takes its inputs' dtype.
detail::json StorageJson(const std::optional<KvStorage>& storage) {
  if (!storage.has_value()) return detail::json(nullptr);
  if (!IsQuantized(storage->keys)) return detail::json(detail::SafetensorsDType(storage->keys));
  return detail::json{{"keys", DTypeName(storage->keys)}, {"values", DTypeName(storage->values)}};
}

// A layer's kind, block size, layout and state; its K/V go to `writer`.
detail::json LayerJson(const AttentionCache& cache, std::size_t l, detail::TensorWriter& writer,
                       std::uint64_t& slack) {
  detail::json layer;
  std::int64_t block_tokens = 0;
  if (const auto* ring = dynamic_cast<const RotatingKVCache*>(&cache)) {
    block_tokens = ring->BlockTokens();
    layer = {{"kind", "sliding"}, {"window", ring->MaxSize()}};
  } else {
    block_tokens = dynamic_cast<const KVCache&>(cache).BlockTokens();
    layer = {{"kind", "global"}};
  }
  layer["block_tokens"] = block_tokens;
  layer["storage_dtype"] = StorageJson(cache.Storage());
  const std::unique_ptr<Snapshot> state = cache.Snapshot(0);
  const std::optional<detail::KvLayout> layout = detail::LayoutOf(state.get());
  layer["kv"] = detail::LayoutJson(layout);
  const std::string prefix = fmt::format("l{}", l);
  layer["state"] =
      state == nullptr ? detail::json(nullptr) : detail::EncodeLayer(*state, prefix, writer, kFn);
  if (layout.has_value()) {
    const auto slots = writer.entries[prefix + ".keys"]["shape"][2].get<std::int64_t>();
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
