#pragma once
// Builds RaggedSdpa problems for the tests: groups of rows (in shuffled q rows)
// with their own runs and optional shared prefixes, each run with its own
// strides, K/V in one pool per dtype whose layer 0 is NaN and whose layer 1
// (reached through k_byte_offset / v_byte_offset) holds the data, so a kernel
// that ignores the offsets or reads a padding element shows NaN. The expected
// output comes from the float64 SDPA oracle run per row over exactly the keys
// the row sees, computed here from the group's run list and the row's range.
//
// Quantized K/V (dtype.h) are random f32 rows quantized once by the scalar
// tier's convert_rows into byte rows (strides in bytes, some odd, so scales sit
// unaligned); the pool's other bytes are 0xFF, a NaN scale wherever a row is
// misread. The oracle decodes the stored rows by the dtype's definition
// (support/sdpa_reference.cc), kI4H rotated back, so the error measured is the
// kernel's over the stored values, not the quantization's.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/ragged_sdpa.h"
#include "support/sdpa_reference.h"

namespace ringkv::test {

using I64 = std::int64_t;

// How a group's rows see its key list of T keys (L rows, row i).
enum class Ranges : std::uint8_t {
  kCausal,    // [0, T - L + i + 1)
  kWindow,    // [T - L + i + 1 - window, T - L + i + 1), clipped below at 0 by the kernel
  kFull,      // [0, T)
  kEmpty,     // [i, i): nothing
  kOutside,   // [-3, T + 5): the kernel clips to the list
  kExplicit,  // GroupSpec::explicit_ranges
};

struct GroupSpec {
  I64 prefix = -1;
  std::vector<I64> own{};  // run lengths
  I64 rows = 1;
  Ranges ranges = Ranges::kCausal;
  I64 window = 0;
  std::vector<std::pair<I64, I64>> explicit_ranges{};
};

struct RaggedCase {
  std::string name{};
  I64 hq = 4, hkv = 2, d = 64, dv = 64;
  DType dtype = DType::kF32;                 // K's, and V's unless v_dtype is set
  std::optional<DType> v_dtype{};            // quantized V of another dtype than quantized K
  std::vector<std::vector<I64>> prefixes{};  // run lengths of each prefix
  std::vector<GroupSpec> groups{};
  I64 loose_rows = 0;  // q rows in no group
  double tol = 0.0;    // max abs error allowed against the f64 oracle
};

// Owns every buffer and the RaggedSdpaParams that point into them.
struct RaggedProblem {
  std::vector<std::uint32_t> k_pool, v_pool;  // 2 layers each, as raw elements or row bytes
  std::ptrdiff_t k_layer_bytes = 0, v_layer_bytes = 0;
  std::vector<float> q;
  std::vector<kernels::RaggedRun> runs;
  std::vector<kernels::RaggedPrefix> prefixes;
  std::vector<kernels::RaggedGroup> groups;
  std::vector<I64> rows, row_lo, row_hi;
  std::vector<float> out;
  kernels::RaggedSdpaParams params;
  I64 n = 0;
  I64 q_row_stride = 0, q_head_stride = 0;
};

inline constexpr float kOutSentinel = 777.25f;

inline std::uint16_t HalfOf(DType dtype, float x) {
  return dtype == DType::kF16 ? F32ToF16(x) : F32ToBF16(x);
}

// Element `i` of a pool, as stored.
inline void PoolStore(std::vector<std::uint32_t>& pool, DType dtype, std::size_t i, float x) {
  if (dtype == DType::kF32) {
    float* f = reinterpret_cast<float*>(pool.data());
    f[i] = x;
  } else {
    auto* h = reinterpret_cast<std::uint16_t*>(pool.data());
    h[i] = HalfOf(dtype, x);
  }
}

// The group's key list: prefix runs, then its own (indices into runs).
inline std::vector<I64> ListOf(const RaggedProblem& p, const kernels::RaggedGroup& g) {
  std::vector<I64> list;
  if (g.prefix >= 0) {
    const kernels::RaggedPrefix& pre = p.prefixes[static_cast<std::size_t>(g.prefix)];
    for (I64 j = 0; j < pre.run_count; ++j) list.push_back(pre.first_run + j);
  }
  for (I64 j = 0; j < g.run_count; ++j) list.push_back(g.first_run + j);
  return list;
}

inline I64 KeysOf(const RaggedProblem& p, const std::vector<I64>& list) {
  I64 keys = 0;
  for (I64 j : list) keys += p.runs[static_cast<std::size_t>(j)].count;
  return keys;
}

// `rows` rows of `n` values stored as `dtype` at `at`, `stride` apart (both in
// SizeOf(dtype) units): the f32 rows `src` ([rows, n]) written element by
// element, or quantized into byte rows.
inline void StoreRows(std::vector<std::uint32_t>& pool, DType dtype, I64 at, I64 stride,
                      const std::vector<float>& src, I64 rows, I64 n) {
  if (IsQuantized(dtype)) {
    kernels::KernelsFor(kernels::Isa::kScalar)
        ->convert_rows(DType::kF32, src.data(), n, dtype,
                       reinterpret_cast<std::byte*>(pool.data()) + at, stride,
                       static_cast<std::size_t>(rows), static_cast<std::size_t>(n));
    return;
  }
  for (I64 t = 0; t < rows; ++t) {
    for (I64 e = 0; e < n; ++e) {
      PoolStore(pool, dtype, static_cast<std::size_t>(at + t * stride + e),
                src[static_cast<std::size_t>(t * n + e)]);
    }
  }
}

inline void MakeRaggedProblem(const RaggedCase& c, std::uint32_t seed, RaggedProblem& p) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const DType k_dtype = c.dtype;
  const DType v_dtype = c.v_dtype.value_or(c.dtype);
  const I64 k_elem = static_cast<I64>(SizeOf(k_dtype));
  const I64 v_elem = static_cast<I64>(SizeOf(v_dtype));
  // A row in stride units: n elements, or its bytes when quantized.
  const auto row_units = [](DType dtype, I64 n) {
    return IsQuantized(dtype) ? static_cast<I64>(RowBytes(dtype, n)) : n;
  };

  // Runs: every prefix's, then every group's own; run j has row padding j % 3 * 4
  // (j % 3 * 5 bytes for quantized rows) and head padding j % 2 * 7 units.
  std::vector<I64> lengths;
  p.prefixes.clear();
  for (const auto& pre : c.prefixes) {
    p.prefixes.push_back({static_cast<I64>(lengths.size()), static_cast<I64>(pre.size())});
    lengths.insert(lengths.end(), pre.begin(), pre.end());
  }
  std::vector<I64> own_first;
  for (const GroupSpec& g : c.groups) {
    own_first.push_back(static_cast<I64>(lengths.size()));
    lengths.insert(lengths.end(), g.own.begin(), g.own.end());
  }
  std::vector<I64> k_off, v_off, k_row, v_row, k_head, v_head;
  I64 k_total = 0, v_total = 0;
  for (std::size_t j = 0; j < lengths.size(); ++j) {
    const I64 pad = static_cast<I64>(j % 3) * 4;
    const I64 byte_pad = static_cast<I64>(j % 3) * 5;
    const I64 head_pad = static_cast<I64>(j % 2) * 7;
    k_row.push_back(row_units(k_dtype, c.d) + (IsQuantized(k_dtype) ? byte_pad : pad));
    v_row.push_back(row_units(v_dtype, c.dv) + (IsQuantized(v_dtype) ? byte_pad : pad));
    k_head.push_back(lengths[j] * k_row.back() + head_pad);
    v_head.push_back(lengths[j] * v_row.back() + head_pad);
    k_off.push_back(k_total);
    v_off.push_back(v_total);
    k_total += c.hkv * k_head.back() + 16;
    v_total += c.hkv * v_head.back() + 16;
  }
  k_total = (k_total + 15) / 16 * 16;
  v_total = (v_total + 15) / 16 * 16;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto fill = [nan](std::vector<std::uint32_t>& pool, DType dtype, I64 total, I64 elem) {
    pool.assign(static_cast<std::size_t>((2 * total * elem + 3) / 4), 0xFFFFFFFFu);
    if (IsQuantized(dtype)) return;  // 0xFF bytes: any f32 scale read there is NaN
    for (I64 i = 0; i < 2 * total; ++i) PoolStore(pool, dtype, static_cast<std::size_t>(i), nan);
  };
  fill(p.k_pool, k_dtype, k_total, k_elem);
  fill(p.v_pool, v_dtype, v_total, v_elem);
  p.k_layer_bytes = k_total * k_elem;
  p.v_layer_bytes = v_total * v_elem;
  p.runs.clear();
  for (std::size_t j = 0; j < lengths.size(); ++j) {
    for (I64 h = 0; h < c.hkv; ++h) {
      // Drawn key row, value row, key row, ...: the order the float cases always had.
      std::vector<float> k_rows(static_cast<std::size_t>(lengths[j] * c.d));
      std::vector<float> v_rows(static_cast<std::size_t>(lengths[j] * c.dv));
      for (I64 t = 0; t < lengths[j]; ++t) {
        for (I64 e = 0; e < c.d; ++e) k_rows[static_cast<std::size_t>(t * c.d + e)] = dist(rng);
        for (I64 e = 0; e < c.dv; ++e) v_rows[static_cast<std::size_t>(t * c.dv + e)] = dist(rng);
      }
      const I64 k_at = k_total + k_off[j] + h * k_head[j];
      const I64 v_at = v_total + v_off[j] + h * v_head[j];
      StoreRows(p.k_pool, k_dtype, k_at, k_row[j], k_rows, lengths[j], c.d);
      StoreRows(p.v_pool, v_dtype, v_at, v_row[j], v_rows, lengths[j], c.dv);
    }
    kernels::RaggedRun run;
    run.k = reinterpret_cast<const std::byte*>(p.k_pool.data()) + k_off[j] * k_elem;
    run.v = reinterpret_cast<const std::byte*>(p.v_pool.data()) + v_off[j] * v_elem;
    run.count = lengths[j];
    run.k_head_stride = k_head[j];
    run.k_row_stride = k_row[j];
    run.v_head_stride = v_head[j];
    run.v_row_stride = v_row[j];
    p.runs.push_back(run);
  }

  // Rows: group rows and loose rows in shuffled q rows; the groups' row lists are
  // laid out in `rows` last group first.
  I64 grouped = 0;
  for (const GroupSpec& g : c.groups) grouped += g.rows;
  p.n = grouped + c.loose_rows;
  std::vector<I64> perm(static_cast<std::size_t>(p.n));
  std::iota(perm.begin(), perm.end(), I64{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  p.rows.assign(static_cast<std::size_t>(grouped), -1);
  p.row_lo.assign(static_cast<std::size_t>(p.n), 12345);  // loose rows: ignored
  p.row_hi.assign(static_cast<std::size_t>(p.n), -777);
  p.groups.clear();
  I64 next_q = 0;
  I64 slot = grouped;
  for (std::size_t gi = 0; gi < c.groups.size(); ++gi) {
    const GroupSpec& spec = c.groups[gi];
    slot -= spec.rows;
    kernels::RaggedGroup g;
    g.first_row = slot;
    g.row_count = spec.rows;
    g.prefix = spec.prefix;
    g.first_run = own_first[gi];
    g.run_count = static_cast<I64>(spec.own.size());
    p.groups.push_back(g);
    const I64 t = KeysOf(p, ListOf(p, g));
    for (I64 i = 0; i < spec.rows; ++i) {
      const I64 r = perm[static_cast<std::size_t>(next_q++)];
      p.rows[static_cast<std::size_t>(slot + i)] = r;
      const I64 end = t - spec.rows + i + 1;
      std::pair<I64, I64> range;
      switch (spec.ranges) {
        case Ranges::kCausal:
          range = {0, end};
          break;
        case Ranges::kWindow:
          range = {end - spec.window, end};
          break;
        case Ranges::kFull:
          range = {0, t};
          break;
        case Ranges::kEmpty:
          range = {i, i};
          break;
        case Ranges::kOutside:
          range = {-3, t + 5};
          break;
        case Ranges::kExplicit:
          range = spec.explicit_ranges[static_cast<std::size_t>(i)];
          break;
      }
      p.row_lo[static_cast<std::size_t>(r)] = range.first;
      p.row_hi[static_cast<std::size_t>(r)] = range.second;
    }
  }

  // q [1, Hq, N, D] with padded rows and heads; out [1, Hq, N, Dv] likewise.
  p.q_row_stride = c.d + 3;
  p.q_head_stride = p.n * p.q_row_stride + 5;
  p.q.resize(static_cast<std::size_t>(c.hq * p.q_head_stride));
  for (float& x : p.q) x = dist(rng);
  const I64 out_row = c.dv + 5;
  const I64 out_head = p.n * out_row + 2;
  p.out.assign(static_cast<std::size_t>(c.hq * out_head), kOutSentinel);

  kernels::RaggedSdpaParams& params = p.params;
  params.q = {p.q.data(),
              DType::kF32,
              {1, c.hq, p.n, c.d},
              {c.hq * p.q_head_stride, p.q_head_stride, p.q_row_stride, 1}};
  params.k_dtype = k_dtype;
  params.v_dtype = v_dtype;
  params.kv_heads = c.hkv;
  params.value_dim = c.dv;
  params.k_byte_offset = p.k_layer_bytes;
  params.v_byte_offset = p.v_layer_bytes;
  params.runs = p.runs;
  params.prefixes = p.prefixes;
  params.groups = p.groups;
  params.rows = p.rows;
  params.row_lo = p.row_lo;
  params.row_hi = p.row_hi;
  params.out = p.out.data();
  params.out_strides = {c.hq * out_head, out_head, out_row, 1};
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
}

// Key `t` of a group's list: (run index, row inside the run).
inline std::pair<I64, I64> Locate(const RaggedProblem& p, const kernels::RaggedGroup& g, I64 t) {
  for (I64 j : ListOf(p, g)) {
    const I64 count = p.runs[static_cast<std::size_t>(j)].count;
    if (t < count) return {j, t};
    t -= count;
  }
  return {-1, -1};
}

// The oracle: [Hq, N, Dv], each row over exactly the keys it sees, for what
// `table` computes (ReferenceSdpaFor).
inline std::vector<double> RaggedExpected(const RaggedProblem& p,
                                          const kernels::KernelTable& table) {
  const kernels::RaggedSdpaParams& params = p.params;
  const I64 hq = params.q.shape[1];
  const I64 d = params.q.shape[3];
  const I64 dv = params.value_dim;
  std::vector<double> want(static_cast<std::size_t>(hq * p.n * dv), 0.0);
  const I64 k_elem = static_cast<I64>(SizeOf(params.k_dtype));
  const I64 v_elem = static_cast<I64>(SizeOf(params.v_dtype));
  for (const kernels::RaggedGroup& g : p.groups) {
    const std::vector<I64> list = ListOf(p, g);
    const I64 keys = KeysOf(p, list);
    for (I64 j = g.first_row; j < g.first_row + g.row_count; ++j) {
      const I64 r = p.rows[static_cast<std::size_t>(j)];
      const I64 lo = std::max<I64>(p.row_lo[static_cast<std::size_t>(r)], 0);
      const I64 hi = std::min(p.row_hi[static_cast<std::size_t>(r)], keys);
      std::vector<kernels::KvSegment> segs;
      I64 begin = 0;
      for (I64 ri : list) {
        const kernels::RaggedRun& run = p.runs[static_cast<std::size_t>(ri)];
        const I64 a = std::max(lo, begin);
        const I64 b = std::min(hi, begin + run.count);
        if (a < b) {
          kernels::KvSegment seg;
          seg.k = {static_cast<const std::byte*>(run.k) + params.k_byte_offset +
                       (a - begin) * run.k_row_stride * k_elem,
                   params.k_dtype,
                   {1, params.kv_heads, b - a, d},
                   {0, run.k_head_stride, run.k_row_stride, 1}};
          seg.v = {static_cast<const std::byte*>(run.v) + params.v_byte_offset +
                       (a - begin) * run.v_row_stride * v_elem,
                   params.v_dtype,
                   {1, params.kv_heads, b - a, dv},
                   {0, run.v_head_stride, run.v_row_stride, 1}};
          segs.push_back(seg);
        }
        begin += run.count;
      }
      if (segs.empty()) continue;  // no visible key: zeros
      kernels::SdpaParams one;
      one.q = {static_cast<const float*>(params.q.data) + r * params.q.strides[2],
               DType::kF32,
               {1, hq, 1, d},
               {params.q.strides[0], params.q.strides[1], params.q.strides[2], 1}};
      one.kv = segs;
      one.scale = params.scale;
      const std::vector<double> row = ReferenceSdpaFor(one, table);
      for (I64 h = 0; h < hq; ++h) {
        for (I64 e = 0; e < dv; ++e) {
          want[static_cast<std::size_t>((h * p.n + r) * dv + e)] =
              row[static_cast<std::size_t>(h * dv + e)];
        }
      }
    }
  }
  return want;
}

// Max abs error of out against `want`; NaN must match NaN, anything else
// non-finite is an infinite error. Gaps of out must keep the sentinel.
inline double RaggedMaxError(const RaggedProblem& p, const std::vector<double>& want) {
  const I64 hq = p.params.q.shape[1];
  const I64 dv = p.params.value_dim;
  const auto& s = p.params.out_strides;
  double worst = 0.0;
  std::vector<bool> written(p.out.size(), false);
  for (I64 h = 0; h < hq; ++h) {
    for (I64 r = 0; r < p.n; ++r) {
      for (I64 e = 0; e < dv; ++e) {
        const auto at = static_cast<std::size_t>(h * s[1] + r * s[2] + e * s[3]);
        written[at] = true;
        const float got = p.out[at];
        const double w = want[static_cast<std::size_t>((h * p.n + r) * dv + e)];
        if (std::isnan(w) && std::isnan(got)) continue;
        if (!std::isfinite(got) || std::isnan(w)) return std::numeric_limits<double>::infinity();
        worst = std::max(worst, std::abs(static_cast<double>(got) - w));
      }
    }
  }
  for (std::size_t i = 0; i < p.out.size(); ++i) {
    if (!written[i] && p.out[i] != kOutSentinel) return std::numeric_limits<double>::infinity();
  }
  return worst;
}

}  // namespace ringkv::test
