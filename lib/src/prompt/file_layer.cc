#include "file_layer.h"

#include <fmt/format.h>

#include <climits>

#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/snapshot_data.h"

namespace ringkv::detail {
namespace {

const TensorTable::value_type* TensorRef(const json& layer, const char* key,
                                         const std::string& where, const KvLayout& layout,
                                         std::int64_t dim, std::int64_t* slots,
                                         TensorTable& tensors) {
  const std::string name = String(layer, key, where);
  const auto it = tensors.find(name);
  if (it == tensors.end())
    Bad("{} names tensor \"{}\", which the file lacks", where, name.substr(0, 64));
  TensorEntry& e = it->second;
  if (e.used) Bad("tensor {} is used twice", name);
  e.used = true;
  if (e.dtype != layout.key_dtype || e.shape[0] != 1 || e.shape[1] != layout.heads ||
      e.shape[3] != dim || (*slots >= 0 && e.shape[2] != *slots)) {
    Bad("tensor {} is {} [{}, {}, {}, {}], expected {} [1, {}, {}, {}]", name, DTypeName(e.dtype),
        e.shape[0], e.shape[1], e.shape[2], e.shape[3], DTypeName(layout.key_dtype), layout.heads,
        *slots >= 0 ? fmt::format("{}", *slots) : std::string("slots"), dim);
  }
  *slots = e.shape[2];
  return &*it;
}

// What ImportSnapshot requires (snapshot_data.h), checked from the header.
void CheckImportable(const LayerRecord& r, int window, const std::string& where) {
  if (r.from >= r.to) Bad("{}: offsets [{}, {}) must satisfy from < to", where, r.from, r.to);
  if (window == 0) {
    if (r.slots != r.to - r.from) {
      Bad("{}: a span [{}, {}) cannot hold {} slots", where, r.from, r.to, r.slots);
    }
    return;
  }
  const bool ok = r.to <= window
                      ? r.slots == r.to && r.ring_index == r.to
                      : (r.slots == window && r.ring_index >= 1 && r.ring_index <= window) ||
                            (r.slots > window && r.slots <= r.to && r.ring_index == r.slots);
  if (!ok) {
    Bad("{}: a window of {} at offset {} cannot hold {} slots with ring index {}", where, window,
        r.to, r.slots, r.ring_index);
  }
}

}  // namespace

json LayoutJson(const std::optional<KvLayout>& layout) {
  if (!layout.has_value()) return json(nullptr);
  if (layout->Quantized()) {
    // Files name one safetensors element type per layer; quantized rows (data then
    // scales) need their own tensor encoding, which the format does not have yet.
    throw Error(fmt::format(
        "[cache file] a layer stores keys as {} and values as {}: cache and prompt files do not "
        "hold quantized (int8 / int4) layers yet (docs/cache_file.md); nothing was written",
        layout->key_dtype, layout->value_dtype));
  }
  return json{{"dtype", SafetensorsDType(layout->key_dtype)},
              {"heads", layout->heads},
              {"key_dim", layout->k_dim},
              {"value_dim", layout->v_dim}};
}

std::optional<KvLayout> ParseLayout(const json& kv, const std::string& where) {
  if (kv.is_null()) return std::nullopt;
  if (!kv.is_object()) Bad("{} is {}, not an object", where, Describe(kv));
  KvLayout layout;
  layout.key_dtype = ParseDType(String(kv, "dtype", where), where + ".dtype");
  layout.value_dtype = layout.key_dtype;
  layout.heads = Int(kv, "heads", where, 1, INT_MAX);
  layout.k_dim = Int(kv, "key_dim", where, 1, INT_MAX);
  layout.v_dim = Int(kv, "value_dim", where, 1, INT_MAX);
  return layout;
}

json EncodeLayer(const Snapshot& snapshot, const std::string& prefix, TensorWriter& writer) {
  const SnapshotData data = ExportSnapshot(snapshot);
  const std::string keys = prefix + ".keys";
  const std::string values = prefix + ".values";
  writer.Add(keys, data.keys);
  writer.Add(values, data.values);
  return json{{"from", data.from},
              {"to", data.to},
              {"ring_index", data.ring_index},
              {"keys", keys},
              {"values", values}};
}

LayerRecord ParseLayerOffsets(const json& layer, const std::string& where) {
  if (!layer.is_object()) Bad("{} is {}, not an object", where, Describe(layer));
  LayerRecord r;
  r.present = true;
  r.from = static_cast<int>(Int(layer, "from", where, 0, INT_MAX));
  r.to = static_cast<int>(Int(layer, "to", where, 0, INT_MAX));
  r.ring_index = static_cast<int>(Int(layer, "ring_index", where, 0, INT_MAX));
  return r;
}

void ParseLayerTensors(const json& layer, const std::optional<KvLayout>& layout, int window,
                       const std::string& where, TensorTable& tensors, LayerRecord& record) {
  if (!layout.has_value()) Bad("{} has K/V, but its layer's kv is null", where);
  std::int64_t slots = -1;
  record.keys = TensorRef(layer, "keys", where, *layout, layout->k_dim, &slots, tensors);
  record.values = TensorRef(layer, "values", where, *layout, layout->v_dim, &slots, tensors);
  record.slots = slots;
  CheckImportable(record, window, where);
}

std::unique_ptr<Snapshot> ImportLayer(const LayerRecord& record, int window,
                                      std::int64_t block_tokens, const ByteSource& source,
                                      std::uint64_t data_offset, const std::string& where) {
  SnapshotData data;
  data.kind = window == 0 ? SnapshotData::Kind::kKv : SnapshotData::Kind::kRotating;
  data.from = record.from;
  data.to = record.to;
  data.ring_index = record.ring_index;
  data.keys = ReadTensor(source, data_offset, *record.keys);
  data.values = ReadTensor(source, data_offset, *record.values);
  try {
    return ImportSnapshot(data, window, block_tokens);
  } catch (const Error& e) {
    Bad("{}: {}", where, e.what());
  }
}

}  // namespace ringkv::detail
