#include "file_layer.h"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <optional>
#include <span>

#include "quantized_layer.h"
#include "quantized_side.h"
#include "ringkv/dtype.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "ringkv/snapshot_data.h"

namespace ringkv::detail {
namespace {

// One side (K or V) of the layout: float elements of `dtype`, or (quantized)
// U8 stored rows of RowBytes(dtype, dim) bytes.
const TensorTable::value_type* TensorRef(const json& layer, const char* key,
                                         const std::string& where, const KvLayout& layout,
                                         DType dtype, std::int64_t dim, std::int64_t* slots,
                                         TensorTable& tensors) {
  const std::string name = String(layer, key, where);
  const auto it = tensors.find(name);
  if (it == tensors.end())
    Bad("{} names tensor \"{}\", which the file lacks", where, name.substr(0, 64));
  TensorEntry& e = it->second;
  if (e.used) Bad("tensor {} is used twice", name);
  e.used = true;
  const bool quantized = IsQuantized(dtype);
  const std::int64_t last = quantized ? static_cast<std::int64_t>(RowBytes(dtype, dim)) : dim;
  if (e.u8 != quantized || (!quantized && e.dtype != dtype) || e.shape[0] != 1 ||
      e.shape[1] != layout.heads || e.shape[3] != last || (*slots >= 0 && e.shape[2] != *slots)) {
    Bad("tensor {} is {} [{}, {}, {}, {}], expected {} [1, {}, {}, {}]{}", name, EntryDTypeName(e),
        e.shape[0], e.shape[1], e.shape[2], e.shape[3], quantized ? "U8" : DTypeName(dtype),
        layout.heads, *slots >= 0 ? fmt::format("{}", *slots) : std::string("slots"), last,
        quantized
            ? fmt::format(" ({} rows of {} values are {} bytes, scales included)", dtype, dim, last)
            : std::string());
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
  if (!layout->Quantized()) {
    return json{{"dtype", SafetensorsDType(layout->key_dtype)},
                {"heads", layout->heads},
                {"key_dim", layout->k_dim},
                {"value_dim", layout->v_dim}};
  }
  return json{{"heads", layout->heads},
              {"key_dim", layout->k_dim},
              {"value_dim", layout->v_dim},
              {"keys", QuantizedSideJson(layout->key_dtype, layout->k_dim)},
              {"values", QuantizedSideJson(layout->value_dtype, layout->v_dim)}};
}

std::optional<KvLayout> ParseLayout(const json& kv, const std::string& where) {
  if (kv.is_null()) return std::nullopt;
  if (!kv.is_object()) Bad("{} is {}, not an object", where, Describe(kv));
  KvLayout layout;
  layout.heads = Int(kv, "heads", where, 1, INT_MAX);
  layout.k_dim = Int(kv, "key_dim", where, 1, INT_MAX);
  layout.v_dim = Int(kv, "value_dim", where, 1, INT_MAX);
  // A float layout names one dtype; a quantized one describes each side.
  if (kv.contains("dtype") || !kv.contains("keys")) {
    if (kv.contains("keys") || kv.contains("values")) {
      Bad("{} has both a dtype and per-side keys / values: a float layout or a quantized one",
          where);
    }
    layout.key_dtype = ParseDType(String(kv, "dtype", where), where + ".dtype");
    layout.value_dtype = layout.key_dtype;
    return layout;
  }
  layout.key_dtype = ParseQuantizedSide(Field(kv, "keys", where), layout.k_dim, where + ".keys");
  layout.value_dtype =
      ParseQuantizedSide(Field(kv, "values", where), layout.v_dim, where + ".values");
  return layout;
}

json EncodeLayer(const Snapshot& snapshot, const std::string& prefix, TensorWriter& writer,
                 const char* function) {
  const std::string keys = prefix + ".keys";
  const std::string values = prefix + ".values";
  json out;
  if (const std::optional<KvLayout> layout = LayoutOf(&snapshot);
      layout.has_value() && layout->Quantized()) {
    StoredLayer data = ExportStoredRows(snapshot);
    CheckScalesToWrite(data.keys, layout->key_dtype, layout->k_dim, data.slots, keys, function);
    CheckScalesToWrite(data.values, layout->value_dtype, layout->v_dim, data.slots, values,
                       function);
    const auto shape = [&](DType dtype, std::int64_t dim) {
      return std::array<std::int64_t, 4>{1, layout->heads, data.slots,
                                         static_cast<std::int64_t>(RowBytes(dtype, dim))};
    };
    writer.AddBytes(keys, shape(layout->key_dtype, layout->k_dim), std::move(data.keys));
    writer.AddBytes(values, shape(layout->value_dtype, layout->v_dim), std::move(data.values));
    out = json{{"from", data.from}, {"to", data.to}, {"ring_index", data.ring_index}};
  } else {
    const SnapshotData data = ExportSnapshot(snapshot);
    writer.Add(keys, data.keys);
    writer.Add(values, data.values);
    out = json{{"from", data.from}, {"to", data.to}, {"ring_index", data.ring_index}};
  }
  out["keys"] = keys;
  out["values"] = values;
  return out;
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
  record.keys =
      TensorRef(layer, "keys", where, *layout, layout->key_dtype, layout->k_dim, &slots, tensors);
  record.values = TensorRef(layer, "values", where, *layout, layout->value_dtype, layout->v_dim,
                            &slots, tensors);
  record.slots = slots;
  record.layout = *layout;
  CheckImportable(record, window, where);
}

std::unique_ptr<Snapshot> ImportLayer(const LayerRecord& record, int window,
                                      std::int64_t block_tokens, const ByteSource& source,
                                      std::uint64_t data_offset, const std::string& where) {
  const SnapshotData::Kind kind =
      window == 0 ? SnapshotData::Kind::kKv : SnapshotData::Kind::kRotating;
  if (record.layout.Quantized()) {
    StoredLayer layer;
    layer.kind = kind;
    layer.from = record.from;
    layer.to = record.to;
    layer.ring_index = record.ring_index;
    layer.layout = record.layout;
    layer.slots = record.slots;
    layer.keys = ReadBytes(source, data_offset, *record.keys);
    layer.values = ReadBytes(source, data_offset, *record.values);
    BadScaleError(
        FirstBadScale(layer.keys, record.layout.key_dtype, record.layout.k_dim, record.slots),
        record.layout.key_dtype, record.keys->first);
    BadScaleError(
        FirstBadScale(layer.values, record.layout.value_dtype, record.layout.v_dim, record.slots),
        record.layout.value_dtype, record.values->first);
    // Everything ImportSnapshot checks was checked from the header (CheckImportable).
    return ImportStoredRows(layer, window, block_tokens);
  }
  SnapshotData data;
  data.kind = kind;
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

void VerifyLayer(const LayerRecord& record, const ByteSource& source, std::uint64_t data_offset) {
  const auto verify = [&](const TensorTable::value_type& tensor, DType dtype, std::int64_t dim) {
    if (!IsQuantized(dtype)) {
      VerifyTensor(source, data_offset, tensor);
      return;
    }
    std::optional<BadScale> bad;
    VerifyTensor(source, data_offset, tensor,
                 [&](std::int64_t first_row, std::span<const std::byte> rows) {
                   if (!bad.has_value())
                     bad = FirstBadScale(rows, dtype, dim, record.slots, first_row);
                 });
    // After the checksum, as ImportLayer reports them.
    BadScaleError(bad, dtype, tensor.first);
  };
  verify(*record.keys, record.layout.key_dtype, record.layout.k_dim);
  verify(*record.values, record.layout.value_dtype, record.layout.v_dim);
}

}  // namespace ringkv::detail
