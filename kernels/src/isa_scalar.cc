// The plain scalar tier: portable loops, no intrinsics. It is also the fallback
// on CPUs without SSE4.2, and it is tested against reference.cc like every tier.
#include <cmath>
#include <cstring>
#include <gsl/assert>
#include <limits>

#include "attend_tile.h"
#include "fill_kernels.h"
#include "hadamard.h"
#include "quantize_row.h"
#include "ringkv/kernels/dtype.h"

namespace ringkv::kernels {
namespace {

// Element i of a row that may sit at any byte address (convert_rows takes rows
// at byte offsets): memcpy, not a typed access, so a misaligned row is defined.
template <class T>
T LoadAt(const void* src, std::size_t i) {
  T x;
  __builtin_memcpy(&x, static_cast<const unsigned char*>(src) + i * sizeof(T), sizeof x);
  return x;
}

template <class T>
void StoreAt(void* dst, std::size_t i, T x) {
  __builtin_memcpy(static_cast<unsigned char*>(dst) + i * sizeof(T), &x, sizeof x);
}

float LoadAsFloat(DType dtype, const void* src, std::size_t i) {
  switch (dtype) {
    case DType::kF32:
      return LoadAt<float>(src, i);
    case DType::kF16:
      return F16ToF32(LoadAt<std::uint16_t>(src, i));
    case DType::kBF16:
      return BF16ToF32(LoadAt<std::uint16_t>(src, i));
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;  // quantized rows are read through their scales, never element-wise
  }
  return 0.0f;
}

void StoreFromFloat(DType dtype, void* dst, std::size_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      StoreAt<float>(dst, i, value);
      return;
    case DType::kF16:
      StoreAt<std::uint16_t>(dst, i, F32ToF16(value));
      return;
    case DType::kBF16:
      StoreAt<std::uint16_t>(dst, i, F32ToBF16(value));
      return;
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      return;  // quantized rows are written through their scales, never element-wise
  }
}

void Convert(DType from, const void* src, DType to, void* dst, std::size_t n) noexcept {
  if (from == to) {
    std::memcpy(dst, src, n * SizeOf(from));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) StoreFromFloat(to, dst, i, LoadAsFloat(from, src, i));
}

// Value i of a kI4 row of n values: s_g * q_i.
float I4RowValue(const std::uint8_t* row, std::size_t n, std::size_t i) {
  return LoadQuantScale(row + n / 2 + i / static_cast<std::size_t>(kI4Group) * 4) *
         static_cast<float>(I4Value(row, i));
}

// A kI4 row of n values from `load(i)`, one group at a time.
template <class Load>
void QuantizeI4RowScalar(Load load, std::size_t n, std::uint8_t* out) {
  constexpr auto kGroup = static_cast<std::size_t>(kI4Group);
  for (std::size_t g = 0; g < n / kGroup; ++g) QuantizeI4GroupScalar(load, n, g, kGroup, out);
}

// One row of convert_rows (see kernel_table.h), through quantize_row.h and hadamard.h.
void ConvertRow(DType from, const std::uint8_t* src, DType to, std::uint8_t* dst, std::size_t n) {
  const auto load = [&](std::size_t i) { return LoadAsFloat(from, src, i); };
  if (from == to) {
    std::memcpy(dst, src, RowBytes(from, static_cast<std::int64_t>(n)));
  } else if (!IsQuantized(from) && !IsQuantized(to)) {
    Convert(from, src, to, dst, n);
  } else if (to == DType::kI8) {
    QuantizeI8RowScalar(load, n, dst);
  } else if (to == DType::kI4) {
    QuantizeI4RowScalar(load, n, dst);
  } else if (to == DType::kI4H) {
    QuantizeRotatedRow(
        [&](std::size_t o, std::size_t b, float* x) {
          for (std::size_t i = 0; i < b; ++i) x[i] = load(o + i);
        },
        [](const float* x, std::size_t b, std::uint8_t* row) {
          QuantizeI4RowScalar([x](std::size_t i) { return x[i]; }, b, row);
        },
        n, dst);
  } else if (from == DType::kI8) {
    const float s = LoadQuantScale(src + n);
    for (std::size_t i = 0; i < n; ++i) {
      StoreFromFloat(to, dst, i, s * static_cast<float>(static_cast<std::int8_t>(src[i])));
    }
  } else if (from == DType::kI4) {
    for (std::size_t i = 0; i < n; ++i) StoreFromFloat(to, dst, i, I4RowValue(src, n, i));
  } else {
    DequantizeRotatedRow(
        src, n,
        [](const std::uint8_t* row, std::size_t b, float* x) {
          for (std::size_t i = 0; i < b; ++i) x[i] = I4RowValue(row, b, i);
        },
        [&](std::size_t o, std::size_t b, const float* x) {
          for (std::size_t i = 0; i < b; ++i) StoreFromFloat(to, dst, o + i, x[i]);
        });
  }
}

void ConvertRows(DType from, const void* src, std::ptrdiff_t src_stride, DType to, void* dst,
                 std::ptrdiff_t dst_stride, std::size_t rows, std::size_t n) noexcept {
  Expects(!(IsQuantized(from) && IsQuantized(to) && from != to));
  Expects((!IsInt4(from) && !IsInt4(to)) || n % static_cast<std::size_t>(kI4Group) == 0);
  const auto src_bytes = src_stride * static_cast<std::ptrdiff_t>(SizeOf(from));
  const auto dst_bytes = dst_stride * static_cast<std::ptrdiff_t>(SizeOf(to));
  for (std::size_t r = 0; r < rows; ++r) {
    const auto ri = static_cast<std::ptrdiff_t>(r);
    ConvertRow(from, static_cast<const std::uint8_t*>(src) + ri * src_bytes, to,
               static_cast<std::uint8_t*>(dst) + ri * dst_bytes, n);
  }
}

void RingGather(const void* src, std::ptrdiff_t src_row_stride, void* dst,
                std::ptrdiff_t dst_row_stride, std::size_t rows, std::size_t k,
                std::size_t ring_idx, std::size_t elem_size) noexcept {
  // Slot s holds logical column (s - ring_idx) mod k: the row is rotated right
  // by ring_idx, i.e. logical [k - r, k) lands in slots [0, r).
  const std::size_t r = k == 0 ? 0 : ring_idx % k;
  for (std::size_t row = 0; row < rows; ++row) {
    const auto* s = static_cast<const std::byte*>(src) + static_cast<std::ptrdiff_t>(row) *
                                                             src_row_stride *
                                                             static_cast<std::ptrdiff_t>(elem_size);
    auto* d = static_cast<std::byte*>(dst) + static_cast<std::ptrdiff_t>(row) * dst_row_stride *
                                                 static_cast<std::ptrdiff_t>(elem_size);
    std::memcpy(d, s + (k - r) * elem_size, r * elem_size);
    std::memcpy(d + r * elem_size, s, (k - r) * elem_size);
  }
}

// Values [c0, c0 + count) of the row that starts `row` strides (SizeOf units)
// into `base`, a row of n values, as floats: quantized rows read as s * q. The
// dtype is switched on once per chunk, not once per value.
void RowChunk(DType dtype, const void* base, std::size_t row, std::size_t n, std::size_t c0,
              std::size_t count, float* out) {
  const auto* bytes = static_cast<const std::uint8_t*>(base);
  switch (dtype) {
    case DType::kF32:
      for (std::size_t c = 0; c < count; ++c) out[c] = LoadAt<float>(base, row + c0 + c);
      return;
    case DType::kF16:
      for (std::size_t c = 0; c < count; ++c) {
        out[c] = F16ToF32(LoadAt<std::uint16_t>(base, row + c0 + c));
      }
      return;
    case DType::kBF16:
      for (std::size_t c = 0; c < count; ++c) {
        out[c] = BF16ToF32(LoadAt<std::uint16_t>(base, row + c0 + c));
      }
      return;
    case DType::kI8: {
      const float scale = LoadQuantScale(bytes + row + n);
      for (std::size_t c = 0; c < count; ++c) {
        out[c] = scale * static_cast<float>(static_cast<std::int8_t>(bytes[row + c0 + c]));
      }
      return;
    }
    case DType::kI4:
    case DType::kI4H:
      for (std::size_t c = 0; c < count; ++c) out[c] = I4RowValue(bytes + row, n, c0 + c);
      return;
  }
}

// The mask term of row (g, i) and global key t: 0, -inf, or the additive value.
float MaskTerm(const AttendTile& tile, std::int64_t g, std::int64_t i, std::int64_t t) {
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  if (tile.row_lo != nullptr) return t >= tile.row_lo[i] && t < tile.row_hi[i] ? 0.0f : kHidden;
  const std::int64_t pos = tile.pos0 + i;
  const std::int64_t off =
      g * tile.mask_head_stride + i * tile.mask_row_stride + t * tile.mask_key_stride;
  switch (tile.mask_kind) {
    case MaskKind::kNone:
      return 0.0f;
    case MaskKind::kCausal:
      return t <= pos ? 0.0f : kHidden;
    case MaskKind::kWindow:
      return t > pos - tile.window ? 0.0f : kHidden;
    case MaskKind::kSlidingWindow:
      return t <= pos && t > pos - tile.window ? 0.0f : kHidden;
    case MaskKind::kAdditive:
      return static_cast<const float*>(tile.mask)[off];
    case MaskKind::kBoolean:
      return static_cast<const std::uint8_t*>(tile.mask)[off] != 0 ? 0.0f : kHidden;
  }
  return 0.0f;
}

// sum_c q[c] v[c] over count <= 64 values, in kLanes partial sums added as a
// tree: one running sum made each product wait for the last add.
float ChunkDot(const float* q, const float* v, std::size_t count) {
  constexpr std::size_t kLanes = 8;
  float part[kLanes] = {};
  std::size_t c = 0;
  for (; c + kLanes <= count; c += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) part[l] += q[c + l] * v[c + l];
  }
  for (; c < count; ++c) part[c % kLanes] += q[c] * v[c];
  for (std::size_t w = kLanes / 2; w > 0; w /= 2) {
    for (std::size_t l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

// acc[c] += p v[c] over count values. acc never overlaps v, and the blocks of
// kLanes let the compiler use the baseline ISA's vectors (SSE2 on x86-64)
// without a scalar epilogue; element by element, each add waited on its own
// load and store.
void AddScaled(float* __restrict acc, float p, const float* __restrict v, std::size_t count) {
  constexpr std::size_t kLanes = 8;
  std::size_t c = 0;
  for (; c + kLanes <= count; c += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) acc[c + l] += p * v[c + l];
  }
  for (; c < count; ++c) acc[c] += p * v[c];
}

// Streaming online softmax, one key at a time: when a key raises a row's running
// max m, its old sum and accumulator are rescaled by exp(m_old - m_new). Keys
// with a -inf score (hidden) are skipped, their V unread, as in the reference.
// Keys are the outer loop so that each K and V row is converted to f32 once, a
// chunk at a time, for all G heads and rows of the tile: walking the keys once
// per row converted every value G x L times, through a dtype switch per value,
// and made this fused kernel slower than an unfused scalar attention
// (docs/benchmarks.md, "Fused vs unfused decode").
void Attend(const AttendTile& tile) noexcept {
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  constexpr std::size_t kChunk = 64;
  const auto d = static_cast<std::size_t>(tile.d);
  const auto dv = static_cast<std::size_t>(tile.dv);
  const std::int64_t state_rows = tile.heads * tile.rows;
  // Per state row, for the current key: the mask term (kHidden once the key is
  // skipped for the row), then the dot product, then the weight p.
  float* const bias = tile.scratch;
  float* const dot = tile.scratch + state_rows;
  const auto q_row = [&tile](std::int64_t g, std::int64_t i) {
    const std::int64_t qi = tile.q_rows != nullptr ? tile.q_rows[i] : i;
    return tile.q + g * tile.q_head_stride + qi * tile.q_row_stride;
  };
  for (std::int64_t r = 0; r < state_rows; ++r) {
    tile.m[r] = kHidden;
    tile.l[r] = 0.0f;
    float* acc = tile.acc + r * tile.acc_stride;
    for (std::size_t c = 0; c < dv; ++c) acc[c] = 0.0f;
  }
  float values[kChunk];
  for (std::int64_t run_index = 0; run_index < tile.run_count; ++run_index) {
    const KvRun& run = tile.runs[run_index];
    const std::int64_t first = run.begin > tile.t0 ? run.begin : tile.t0;
    const std::int64_t end = run.begin + run.count < tile.t1 ? run.begin + run.count : tile.t1;
    for (std::int64_t t = first; t < end; ++t) {
      bool seen = false;
      for (std::int64_t g = 0; g < tile.heads; ++g) {
        for (std::int64_t i = 0; i < tile.rows; ++i) {
          const std::int64_t r = g * tile.rows + i;
          bias[r] = MaskTerm(tile, g, i, t);
          dot[r] = 0.0f;
          seen = seen || bias[r] != kHidden;
        }
      }
      if (!seen) continue;
      const auto k_off = static_cast<std::size_t>((t - run.begin) * run.k_stride);
      for (std::size_t c0 = 0; c0 < d; c0 += kChunk) {
        const std::size_t count = d - c0 < kChunk ? d - c0 : kChunk;
        RowChunk(tile.k_dtype, run.k, k_off, d, c0, count, values);
        for (std::int64_t g = 0; g < tile.heads; ++g) {
          for (std::int64_t i = 0; i < tile.rows; ++i) {
            const std::int64_t r = g * tile.rows + i;
            if (bias[r] == kHidden) continue;
            dot[r] += ChunkDot(q_row(g, i) + c0, values, count);
          }
        }
      }
      bool weighted = false;
      for (std::int64_t r = 0; r < state_rows; ++r) {
        if (bias[r] == kHidden) continue;
        const float s = tile.scale * dot[r] + bias[r];
        if (s == kHidden) {  // weight 0: skipped
          bias[r] = kHidden;
          continue;
        }
        // A NaN score becomes the max and sticks (nothing compares greater), so
        // every later alpha and p is NaN; +inf gives p = exp(inf - inf) = NaN.
        float& m = tile.m[r];
        if (s > m || s != s) {
          const float alpha = std::exp(m - s);
          tile.l[r] *= alpha;
          float* acc = tile.acc + r * tile.acc_stride;
          for (std::size_t c = 0; c < dv; ++c) acc[c] *= alpha;
          m = s;
        }
        dot[r] = std::exp(s - m);
        tile.l[r] += dot[r];
        weighted = true;
      }
      if (!weighted) continue;
      const auto v_off = static_cast<std::size_t>((t - run.begin) * run.v_stride);
      for (std::size_t c0 = 0; c0 < dv; c0 += kChunk) {
        const std::size_t count = dv - c0 < kChunk ? dv - c0 : kChunk;
        RowChunk(tile.v_dtype, run.v, v_off, dv, c0, count, values);
        for (std::int64_t r = 0; r < state_rows; ++r) {
          if (bias[r] == kHidden) continue;
          AddScaled(tile.acc + r * tile.acc_stride + c0, dot[r], values, count);
        }
      }
    }
  }
}

}  // namespace

void FillScalarKernels(KernelTable& table) noexcept {
  table.convert = Convert;
  table.convert_rows = ConvertRows;
  table.ring_gather = RingGather;
  table.attend = Attend;
}

}  // namespace ringkv::kernels
