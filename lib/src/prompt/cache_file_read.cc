// LoadCaches: the whole file is checked from its header (caches_format.h)
// before any tensor is read; then each layer's state is read, checked against
// its checksum and restored into a new cache of the layer's kind and block size.
// Every failure is a ringkv::SnapshotError "[LoadCaches] ...".
#include <fmt/format.h>

#include <climits>
#include <optional>
#include <type_traits>

#include "caches_format.h"
#include "file_frame.h"
#include "file_layer.h"
#include "file_tensors.h"
#include "ringkv/cache_file.h"
#include "ringkv/dtype.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

using detail::Bad;
using detail::json;

struct LayerPlan {
  int window = 0;  // 0: a KVCache
  std::int64_t block_tokens = 0;
  std::optional<KvStorage> storage;  // the cache's, not the stored K/V's
  detail::LayerRecord state;         // present when the caches hold tokens
};

constexpr std::string_view kOwnKeys[] = {"format", "version",   "caches",
                                         "tokens", "checksums", "metadata_checksum"};

DType QuantizedName(const json& storage, const char* key, const std::string& where) {
  const std::string name = detail::String(storage, key, where);
  const std::optional<DType> dtype = StorageDTypeNamed(name);
  if (dtype.has_value() && IsQuantized(*dtype)) return *dtype;
  Bad("{}.{} is {}, not int8, int4 or int4h", where, key, detail::Describe(json(name)));
}

// storage_dtype: null, a float dtype's safetensors name, or the quantized
// dtypes of both sides ({"keys": "int8", "values": "int4"}).
std::optional<KvStorage> ParseStorage(const json& storage, const std::string& layer) {
  const std::string where = layer + ".storage_dtype";
  if (storage.is_null()) return std::nullopt;
  if (storage.is_string()) {
    return KvStorage::Same(detail::ParseDType(storage.get<std::string>(), where));
  }
  if (!storage.is_object()) {
    Bad("{} is {}, not a string, an object or null", where, detail::Describe(storage));
  }
  return KvStorage{QuantizedName(storage, "keys", where), QuantizedName(storage, "values", where)};
}

LayerPlan ParseLayer(const json& layer, int offset, const std::string& where,
                     detail::TensorTable& tensors, std::uint64_t& slack) {
  if (!layer.is_object()) Bad("{} is {}, not an object", where, detail::Describe(layer));
  LayerPlan plan;
  const std::string kind = detail::String(layer, "kind", where);
  if (kind != "sliding" && kind != "global") {
    Bad("{}.kind {} is unknown", where, detail::Describe(json(kind)));
  }
  if (kind == "sliding")
    plan.window = static_cast<int>(detail::Int(layer, "window", where, 1, INT_MAX));
  plan.block_tokens = detail::Int(layer, "block_tokens", where, 1, INT_MAX);
  plan.storage = ParseStorage(detail::Field(layer, "storage_dtype", where), where);
  const std::optional<detail::KvLayout> layout =
      detail::ParseLayout(detail::Field(layer, "kv", where), where + ".kv");
  if (layout.has_value() && plan.storage.has_value() && !IsQuantized(plan.storage->keys) &&
      (layout->Quantized() || layout->key_dtype != plan.storage->keys)) {
    Bad("{}.kv.dtype {} is not the layer's storage_dtype {}", where,
        detail::DtypesName(layout->key_dtype, layout->value_dtype), plan.storage->keys);
  }
  if (layout.has_value() && plan.storage.has_value() && IsQuantized(plan.storage->keys) &&
      (layout->key_dtype != plan.storage->keys || layout->value_dtype != plan.storage->values)) {
    Bad("{}.kv holds keys as {} and values as {}, the layer's storage_dtype says {} and {}", where,
        layout->key_dtype, layout->value_dtype, plan.storage->keys, plan.storage->values);
  }
  const json& state = detail::Field(layer, "state", where);
  if (state.is_null() != (offset == 0) || state.is_null() != !layout.has_value()) {
    Bad("{} has {} and kv {}, but the caches are at offset {} (a state and a kv exactly when the "
        "offset is above 0)",
        where, state.is_null() ? "no state" : "a state", layout.has_value() ? "set" : "null",
        offset);
  }
  if (state.is_null()) return plan;
  const std::string state_where = where + ".state";
  plan.state = detail::ParseLayerOffsets(state, state_where);
  if (plan.state.from != 0 || plan.state.to != offset) {
    Bad("{} covers [{}, {}), the caches [0, {})", state_where, plan.state.from, plan.state.to,
        offset);
  }
  detail::ParseLayerTensors(state, layout, plan.window, state_where, tensors, plan.state);
  const std::uint64_t bytes =
      detail::SlackBytes(plan.state.slots, plan.block_tokens, layout->BytesPerToken());
  slack = bytes > UINT64_MAX - slack ? UINT64_MAX : slack + bytes;
  return plan;
}

// An empty cache of the layer's kind, block size and storage (checked above, so
// the constructor accepts them).
template <class Cache>
Cache MakeCache(const LayerPlan& plan) {
  const auto make = [&](auto&&... storage) {
    if constexpr (std::is_same_v<Cache, KVCache>) {
      return KVCache(plan.block_tokens, storage...);
    } else {
      return RotatingKVCache(plan.window, plan.block_tokens, storage...);
    }
  };
  if (plan.storage.has_value()) return make(*plan.storage);
  return make(std::optional<DType>());
}

template <class Cache>
LayerCaches::Layer Restored(Cache cache, const LayerPlan& plan, int offset,
                            const detail::ByteSource& source, std::uint64_t data_offset,
                            const std::string& where) {
  if (plan.state.present) {
    const std::unique_ptr<Snapshot> snapshot =
        detail::ImportLayer(plan.state, plan.window, plan.block_tokens, source, data_offset, where);
    // Checked above: a fresh cache takes a snapshot from 0 of its own kind.
    if (!cache.Restore(snapshot.get(), offset)) Bad("{} cannot be restored", where);
  }
  return LayerCaches::Layer(std::move(cache));
}

SavedCaches Decode(const detail::ByteSource& source) {
  const detail::FileHeader file =
      detail::ReadHeader(source, detail::kCachesHeaderLimit, "16 MiB for a caches file");
  const json& metadata =
      detail::CheckedMetadata(file.header, detail::kCachesFormat, detail::kCachesVersion);
  std::map<std::string, std::string> user = detail::UserEntries(metadata, kOwnKeys);
  const json caches = detail::ParseBounded(detail::String(metadata, "caches", "__metadata__"),
                                           "__metadata__.caches");
  if (!caches.is_object())
    Bad("__metadata__.caches is {}, not an object", detail::Describe(caches));
  const int offset = static_cast<int>(detail::Int(caches, "offset", "caches", 0, INT_MAX));
  const json& layers = detail::Field(caches, "layers", "caches");
  if (!layers.is_array()) Bad("caches.layers is {}, not an array", detail::Describe(layers));
  detail::TensorTable tensors = detail::ParseTensors(file.header, file.data_size);
  detail::AttachChecksums(
      tensors, detail::ParseBounded(detail::String(metadata, "checksums", "__metadata__"),
                                    "__metadata__.checksums"));
  std::vector<LayerPlan> plans;
  plans.reserve(layers.size());
  std::uint64_t slack = 0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    plans.push_back(
        ParseLayer(layers[l], offset, fmt::format("caches.layers[{}]", l), tensors, slack));
  }
  detail::CheckAllUsed(tensors, "layer");
  if (slack > detail::kMaxSlackBytes) {
    Bad("the caches' blocks would hold {} bytes beyond their tokens, over the limit of {}", slack,
        detail::kMaxSlackBytes);
  }
  std::vector<int> tokens =
      detail::Tokens(detail::ParseBounded(detail::String(metadata, "tokens", "__metadata__"),
                                          "__metadata__.tokens"),
                     "__metadata__.tokens");
  std::vector<LayerCaches::Layer> built;
  built.reserve(plans.size());
  for (std::size_t l = 0; l < plans.size(); ++l) {
    const LayerPlan& plan = plans[l];
    const std::string where = fmt::format("caches.layers[{}]", l);
    built.push_back(plan.window == 0 ? Restored(MakeCache<KVCache>(plan), plan, offset, source,
                                                file.data_offset, where)
                                     : Restored(MakeCache<RotatingKVCache>(plan), plan, offset,
                                                source, file.data_offset, where));
  }
  return SavedCaches{LayerCaches(std::move(built)), std::move(tokens), std::move(user)};
}

SavedCaches Load(const detail::ByteSource& source) {
  return detail::Prefixed("LoadCaches", [&] {
    try {
      return Decode(source);
    } catch (const json::exception& e) {
      Bad("malformed header: {}", e.what());
    }
  });
}

}  // namespace

SavedCaches LoadCaches(const std::string& path) {
  return Load(detail::FileSource(path, "LoadCaches"));
}

SavedCaches LoadCachesFromMemory(std::span<const std::byte> file) {
  return Load(detail::MemorySource(file));
}

}  // namespace ringkv
