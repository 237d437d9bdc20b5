#pragma once
// A quantized layer's K/V in a ringkv file: each side's stored rows (dtype.h:
// data then f32 scales) as one U8 tensor [1, Hkv, slots, RowBytes(dtype, dim)],
// moved as bits (nothing is dequantised or requantised), and the scale check
// both directions apply: a scale that is NaN, infinite or negative is never
// written and never loaded.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "../cache/block_store.h"
#include "ringkv/snapshot.h"
#include "ringkv/snapshot_data.h"

namespace ringkv::detail {

// The stored rows of one side of `store` (whose layout is quantized), packed
// [Hkv, slots, RowBytes(dtype, dim)] without the blocks' carrier padding.
std::vector<std::byte> PackStoredRows(const BlockStore& store, bool keys);

// The first scale of `rows` (rows [first_row, ...) of stored rows [Hkv, slots,
// RowBytes(dtype, dim)], whole rows) that is NaN, infinite or negative: where
// it is and what it holds.
struct BadScale {
  std::int64_t head = 0;
  std::int64_t slot = 0;
  std::int64_t group = 0;  // the scale's index within its row
  float value = 0;
};
std::optional<BadScale> FirstBadScale(std::span<const std::byte> rows, DType dtype,
                                      std::int64_t dim, std::int64_t slots,
                                      std::int64_t first_row = 0);

// One layer's snapshot as stored rows: what ExportStoredRows copies out and
// ImportStoredRows rebuilds.
struct StoredLayer {
  SnapshotData::Kind kind = SnapshotData::Kind::kKv;
  int from = 0;
  int to = 0;
  int ring_index = 0;  // kRotating only
  KvLayout layout;     // quantized
  std::int64_t slots = 0;
  std::vector<std::byte> keys;    // [Hkv, slots, RowBytes(key_dtype, k_dim)]
  std::vector<std::byte> values;  // [Hkv, slots, RowBytes(value_dtype, v_dim)]
};

// A KVCache or RotatingKVCache snapshot whose layout is quantized, as stored rows.
StoredLayer ExportStoredRows(const Snapshot& snapshot);

// A snapshot holding exactly these rows, in the blocks ImportSnapshot would
// build (a span at its block phase, a ring from row 0). The caller has checked
// everything ImportSnapshot checks (file_layer.h, CheckImportable) and the
// rows' sizes; only programmer errors remain (GSL Expects).
std::unique_ptr<Snapshot> ImportStoredRows(const StoredLayer& layer, int window,
                                           std::int64_t block_tokens);

}  // namespace ringkv::detail
