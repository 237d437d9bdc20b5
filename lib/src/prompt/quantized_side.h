#pragma once
// How a file describes one quantized side (K or V) of a layer, shared by the
// caches file (file_layer.cc) and the sequence file: its JSON, {"dtype": "int8" |
// "int4" | "int4h", "group": G, "scales": "f32le_after_data"} (int4h also
// "rotation": {"kind": "hadamard", "block": B}), and the scale check both
// directions apply to its U8 rows (quantized_layer.h FirstBadScale).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "json_fields.h"
#include "quantized_layer.h"
#include "ringkv/dtype.h"

namespace ringkv::detail {

json QuantizedSideJson(DType dtype, std::int64_t dim);

// The dtype `side` names for rows of `dim` values, after checking its group,
// rotation and scale layout are the ones ringkv stores; Bad() otherwise.
DType ParseQuantizedSide(const json& side, std::int64_t dim, const std::string& where);

// Loading: a scale that is NaN, infinite or negative marks a corrupted file (Bad()).
void BadScaleError(const std::optional<BadScale>& bad, DType dtype, const std::string& tensor);

// Saving: rows [Hkv, slots, RowBytes(dtype, dim)] with such a scale (a cache
// stores NaN for a row or group given NaN or Inf) throw ringkv::Error naming the
// tensor, row and value; nothing is written.
void CheckScalesToWrite(std::span<const std::byte> rows, DType dtype, std::int64_t dim,
                        std::int64_t slots, const std::string& tensor, const char* function);

}  // namespace ringkv::detail
