#pragma once
// One layer's state in a ringkv file, shared by both formats: the K/V layout
// ({"dtype", "heads", "key_dim", "value_dim"} or null; a quantized layout has
// per-side {"dtype": "int8" | "int4", "group", "scales"} objects "keys" and
// "values" instead of "dtype", docs/cache_file.md) and a snapshot as
// {"from", "to", "ring_index", "keys", "values"}, its K/V being two tensors
// [1, Hkv, slots, D] of the data section (quantized: U8 [1, Hkv, slots,
// RowBytes(dtype, D)], the stored rows as bits). Reading checks everything
// ImportSnapshot requires from the header alone (so a layer can be checked
// without importing it), then imports it from the file's bytes.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "file_source.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "ringkv/snapshot.h"
#include "snapshot_access.h"

namespace ringkv::detail {

struct LayerRecord {
  bool present = false;  // a sliding layer may have no window at a node's end
  int from = 0;
  int to = 0;
  int ring_index = 0;
  std::int64_t slots = 0;
  const TensorTable::value_type* keys = nullptr;
  const TensorTable::value_type* values = nullptr;
  KvLayout layout;  // the layer's (set with the tensors)
};

json LayoutJson(const std::optional<KvLayout>& layout);
// Null gives nullopt.
std::optional<KvLayout> ParseLayout(const json& kv, const std::string& where);

// Adds the snapshot's K/V as tensors "<prefix>.keys" and "<prefix>.values" and
// returns the layer's JSON. Quantized K/V go as U8 stored rows; a scale that
// is NaN (the cache was given NaN or Inf) throws ringkv::Error "[function] ..."
// before anything is added.
json EncodeLayer(const Snapshot& snapshot, const std::string& prefix, TensorWriter& writer,
                 const char* function);

// Step 1: the offsets of a layer object (present), nothing else checked.
LayerRecord ParseLayerOffsets(const json& layer, const std::string& where);
// Step 2: its tensors, named once each and shaped by `layout` (which must be
// set), and what ImportSnapshot requires of a span (window 0) or a ring.
void ParseLayerTensors(const json& layer, const std::optional<KvLayout>& layout, int window,
                       const std::string& where, TensorTable& tensors, LayerRecord& record);
// Step 3: reads its tensors (checked against their checksums and, quantized,
// their scales) and imports them.
std::unique_ptr<Snapshot> ImportLayer(const LayerRecord& record, int window,
                                      std::int64_t block_tokens, const ByteSource& source,
                                      std::uint64_t data_offset, const std::string& where);
// Only checks a layer's tensors, reading in bounded chunks (a node the budget
// drops): their checksums and, quantized, their scales.
void VerifyLayer(const LayerRecord& record, const ByteSource& source, std::uint64_t data_offset);

}  // namespace ringkv::detail
