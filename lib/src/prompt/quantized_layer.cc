#include "quantized_layer.h"

#include <cmath>
#include <cstring>
#include <gsl/assert>

#include "../cache/snapshots.h"
#include "../cache/stored_rows.h"

namespace ringkv::detail {
namespace {

// Bytes of one carrier row (a block's f32 columns) and the packed row inside it.
struct RowShape {
  std::size_t packed;   // RowBytes(dtype, dim)
  std::size_t carrier;  // StoredRowBytes(dtype, dim): packed plus padding to 4 bytes
};

RowShape ShapeOf(const KvLayout& layout, bool keys) {
  const DType dtype = keys ? layout.key_dtype : layout.value_dtype;
  const std::int64_t dim = keys ? layout.k_dim : layout.v_dim;
  Expects(IsQuantized(dtype));
  return {RowBytes(dtype, dim), StoredRowBytes(dtype, dim)};
}

// Byte address of (head, row) in a block segment's carrier view [1, Hkv, n, cols] (f32).
std::size_t CarrierOffset(const Tensor& side, std::int64_t head, std::int64_t row) {
  return static_cast<std::size_t>(head * side.Stride(1) + row * side.Stride(2)) * sizeof(float);
}

}  // namespace

std::vector<std::byte> PackStoredRows(const BlockStore& store, bool keys) {
  const KvLayout& layout = store.Layout();
  const RowShape row = ShapeOf(layout, keys);
  const std::int64_t slots = store.Length();
  std::vector<std::byte> out(static_cast<std::size_t>(layout.heads * slots) * row.packed);
  std::int64_t first = 0;
  store.ForEachSegment(0, slots, [&](const BlockStore::Segment& seg) {
    const Tensor& side = keys ? seg.keys : seg.values;
    const auto* base = static_cast<const std::byte*>(side.Data());
    for (std::int64_t h = 0; h < layout.heads; ++h) {
      for (std::int64_t r = 0; r < side.Dim(2); ++r) {
        const auto at = static_cast<std::size_t>(h * slots + first + r) * row.packed;
        std::memcpy(out.data() + at, base + CarrierOffset(side, h, r), row.packed);
      }
    }
    first += side.Dim(2);
  });
  return out;
}

std::optional<BadScale> FirstBadScale(std::span<const std::byte> rows, DType dtype,
                                      std::int64_t dim, std::int64_t slots,
                                      std::int64_t first_row) {
  Expects(IsQuantized(dtype) && slots >= 1);
  const std::size_t row_bytes = RowBytes(dtype, dim);
  const std::int64_t groups = dtype == DType::kI8 ? 1 : dim / kI4Group;
  const std::size_t data_bytes = row_bytes - static_cast<std::size_t>(groups) * 4;
  Expects(rows.size() % row_bytes == 0);
  for (std::size_t i = 0; i * row_bytes < rows.size(); ++i) {
    const std::byte* scales = rows.data() + i * row_bytes + data_bytes;
    for (std::int64_t g = 0; g < groups; ++g) {
      float value = 0;
      std::memcpy(&value, scales + g * 4, sizeof value);  // unaligned, little-endian host
      // !(value >= 0) also catches NaN; -0.0 compares equal to 0 and is kept.
      if (!(value >= 0) || std::isinf(value)) {
        const std::int64_t row = first_row + static_cast<std::int64_t>(i);
        return BadScale{row / slots, row % slots, g, value};
      }
    }
  }
  return std::nullopt;
}

StoredLayer ExportStoredRows(const Snapshot& snapshot) {
  StoredLayer out;
  const BlockStore* store = nullptr;
  if (const auto* kv = dynamic_cast<const KvSnapshot*>(&snapshot)) {
    store = &kv->Data();
  } else {
    const auto& ring = dynamic_cast<const RotatingSnapshot&>(snapshot);
    out.kind = SnapshotData::Kind::kRotating;
    out.ring_index = ring.RingIndex();
    store = &ring.Data();
  }
  Expects(store->HasLayout() && store->Layout().Quantized());
  out.from = snapshot.FromOffset();
  out.to = snapshot.ToOffset();
  out.layout = store->Layout();
  out.slots = store->Length();
  out.keys = PackStoredRows(*store, true);
  out.values = PackStoredRows(*store, false);
  return out;
}

std::unique_ptr<Snapshot> ImportStoredRows(const StoredLayer& layer, int window,
                                           std::int64_t block_tokens) {
  const KvLayout& layout = layer.layout;
  Expects(layout.Quantized() && layer.slots >= 1 && block_tokens >= 1);
  const RowShape key_row = ShapeOf(layout, true);
  const RowShape value_row = ShapeOf(layout, false);
  const auto rows = static_cast<std::size_t>(layout.heads * layer.slots);
  Expects(layer.keys.size() == rows * key_row.packed &&
          layer.values.size() == rows * value_row.packed);
  BlockStore store(block_tokens);
  store.SetLayout(layout);
  // As ImportSnapshot: a span starts at the block phase a live cache has at
  // `from`, so Restore shares whole blocks instead of copying rows.
  const std::int64_t phase = layer.kind == SnapshotData::Kind::kKv ? layer.from % block_tokens : 0;
  store.Resize(phase + layer.slots);
  // Resize made fresh blocks that only this store holds and no view has seen,
  // so their rows are written in place through the segment views (the stored
  // rows are bits: BlockStore::Write would quantize them again).
  std::int64_t first = 0;
  store.ForEachSegment(phase, phase + layer.slots, [&](const BlockStore::Segment& seg) {
    const auto fill = [&](Tensor side, const std::vector<std::byte>& src, RowShape row) {
      auto* base = static_cast<std::byte*>(side.MutableData());
      for (std::int64_t h = 0; h < layout.heads; ++h) {
        for (std::int64_t r = 0; r < side.Dim(2); ++r) {
          std::byte* dst = base + CarrierOffset(side, h, r);
          const auto at = static_cast<std::size_t>(h * layer.slots + first + r) * row.packed;
          std::memcpy(dst, src.data() + at, row.packed);
          std::memset(dst + row.packed, 0, row.carrier - row.packed);
        }
      }
    };
    fill(seg.keys, layer.keys, key_row);
    fill(seg.values, layer.values, value_row);
    first += seg.keys.Dim(2);
  });
  if (phase > 0) store.DropFront(phase);
  if (layer.kind == SnapshotData::Kind::kKv) {
    Expects(layer.slots == layer.to - layer.from);
    return std::make_unique<KvSnapshot>(std::move(store), layer.from, layer.to);
  }
  Expects(window >= 1);
  return std::make_unique<RotatingSnapshot>(std::move(store), layer.from, layer.to,
                                            layer.ring_index, window);
}

}  // namespace ringkv::detail
