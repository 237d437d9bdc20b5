#include "quantized_side.h"

#include <fmt/format.h>

#include <climits>

#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv::detail {
namespace {

// How a quantized row keeps its scales (dtype.h): little-endian f32, one per
// group, after the row's data.
constexpr const char* kQuantizedScales = "f32le_after_data";
constexpr const char* kRotation = "hadamard";  // orthonormal Sylvester (dtype.h)

}  // namespace

json QuantizedSideJson(DType dtype, std::int64_t dim) {
  json side{{"dtype", DTypeName(dtype)},
            {"group", dtype == DType::kI8 ? dim : kI4Group},
            {"scales", kQuantizedScales}};
  if (dtype == DType::kI4H) side["rotation"] = {{"kind", kRotation}, {"block", I4HBlock(dim)}};
  return side;
}

DType ParseQuantizedSide(const json& side, std::int64_t dim, const std::string& where) {
  if (!side.is_object()) Bad("{} is {}, not an object", where, Describe(side));
  const std::string name = String(side, "dtype", where);
  const std::optional<DType> named = StorageDTypeNamed(name);
  if (!named.has_value() || !IsQuantized(*named)) {
    Bad("{}.dtype is {}, not int8, int4 or int4h", where, Describe(json(name)));
  }
  const DType dtype = *named;
  const std::int64_t group = Int(side, "group", where, 1, INT_MAX);
  const std::int64_t expected = dtype == DType::kI8 ? dim : kI4Group;
  if (group != expected) {
    Bad("{}.group is {}, but {} rows of {} values have one f32 scale per {} values", where, group,
        dtype, dim, expected);
  }
  if (IsInt4(dtype) && dim % kI4Group != 0) {
    Bad("{}: {} rows of {} values are not whole groups of {}", where, dtype, dim, kI4Group);
  }
  if (dtype == DType::kI4H) {
    const std::string rot = where + ".rotation";
    if (!side.contains("rotation") || !side["rotation"].is_object()) {
      Bad("{} is missing or not an object", rot);
    }
    const std::string kind = String(side["rotation"], "kind", rot);
    if (kind != kRotation) Bad("{}.kind is {}, not \"{}\"", rot, Describe(json(kind)), kRotation);
    const std::int64_t block = Int(side["rotation"], "block", rot, 1, INT_MAX);
    if (block != I4HBlock(dim)) {
      Bad("{}.block is {}, but int4h rows of {} values rotate blocks of {}", rot, block, dim,
          I4HBlock(dim));
    }
  }
  const std::string scales = String(side, "scales", where);
  if (scales != kQuantizedScales) {
    Bad("{}.scales is {}, not \"{}\"", where, Describe(json(scales)), kQuantizedScales);
  }
  return dtype;
}

void BadScaleError(const std::optional<BadScale>& bad, DType dtype, const std::string& tensor) {
  if (!bad.has_value()) return;
  Bad("tensor {} row [0, {}, {}] (kv head {}, slot {}) has {} scale {} in group {}, not a "
      "finite value >= 0 (corrupted)",
      tensor, bad->head, bad->slot, bad->head, bad->slot, dtype, bad->value, bad->group);
}

void CheckScalesToWrite(std::span<const std::byte> rows, DType dtype, std::int64_t dim,
                        std::int64_t slots, const std::string& tensor, const char* function) {
  if (const std::optional<BadScale> bad = FirstBadScale(rows, dtype, dim, slots)) {
    throw Error(fmt::format(
        "[{}] tensor {} row [0, {}, {}] (kv head {}, slot {}) has {} scale {} in group {}: the "
        "cache was given NaN or Inf there, and files hold only finite scales >= 0; nothing was "
        "written",
        function, tensor, bad->head, bad->slot, bad->head, bad->slot, dtype, bad->value,
        bad->group));
  }
}

}  // namespace ringkv::detail
