#pragma once
// The SIMD attend kernel (see attend_tile.h): online softmax of a tile of query
// rows (G heads sharing one kv head x Lt rows) against a key range, one block of
// `tile.block` keys at a time:
//   (1) s[r][j] = q_r . k_j       register tiles of rows x keys, K converted in
//                                 registers once per row group, hadd transpose
//   (2) mask; m' = max(m, max_j s), alpha = exp(m - m'), p = exp(s - m'),
//       l = l * alpha + sum_j p   xsimd::exp on whole batches
//   (3) acc = acc * alpha + sum_j p[r][j] v_j   register tiles of rows x Dv
//                                 vectors held across the whole block
// Everything lives in an anonymous namespace (internal linkage, see
// simd_compat-inl.h); no std:: function templates, no std containers.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <type_traits>

#include "attend_tile.h"
#include "fill_kernels.h"
#include "key_major-inl.h"
#include "row_tiles-inl.h"
#include "simd_compat-inl.h"
#include "warm_cursor.h"

namespace ringkv::kernels {
namespace {

constexpr float kAttendNegInf = -__builtin_inff();

// exp(x) for x <= 0 (the online softmax only needs exp(s - max) and
// exp(m_old - m_new)); x < -87 (and -inf) gives 0. Cephes' expf: x = n ln2 + r,
// |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, 2^n through the exponent bits
// (or vscalefps, kScalef, which is the same correctly rounded product). r takes
// one FMA with ln2 rounded to f32, where Cephes splits ln2 in two: that adds
// |n| 1.9e-9 to r, which moves the largest relative error over [-20, 0] from
// 1.17e-7 to 1.21e-7 (2.97e-7 below, where exp(x) < 2^-28).
// Our own rather than xsimd::exp: at -O0 that one leaves weak, arch-less
// instances (xsimd::constants::maxlog<float>() ...) in every ISA object, which
// the linkage rule forbids (tools/check_isa_linkage.sh).
template <class Arch>
__attribute__((always_inline)) inline FloatBatch<Arch> ExpNonPositive(const FloatBatch<Arch>& x) {
  using B = FloatBatch<Arch>;
  // select and the 1.5 * 2^23 rounding trick rather than xsimd::max / floor:
  // GCC 12 reports false -Wuninitialized in their AVX-512 intrinsics (PR 105593).
  // vscalefps takes any n, so that tier needs no clamp: its mask zeroes the
  // lanes below -87, -inf among them (whose r is NaN).
  const B clamped = kScalef<Arch> ? x : xsimd::select(x < B(-87.0f), B(-87.0f), x);
  // 1.5 * 2^23 + 127: adding it rounds to an integer and leaves n + 127 (in
  // [1, 127] here) in the low mantissa bits, which a shift by 23 turns into the
  // exponent of 2^n.
  constexpr float kRoundBiased = 12582912.0f + 127.0f;
  const B biased = clamped * B(1.44269504088896341f) + B(kRoundBiased);
  const B n = biased - B(kRoundBiased);
  const B r = xsimd::fnma(n, B(0.6931471805599453f), clamped);
  B y = B(1.9875691500e-4f);
  y = xsimd::fma(y, r, B(1.3981999507e-3f));
  y = xsimd::fma(y, r, B(8.3334519073e-3f));
  y = xsimd::fma(y, r, B(4.1665795894e-2f));
  y = xsimd::fma(y, r, B(1.6666665459e-1f));
  y = xsimd::fma(y, r, B(5.0000001201e-1f));
  y = xsimd::fma(y, r * r, r + B(1.0f));
  if constexpr (kScalef<Arch>) {
    return ScalefUnless<Arch>(y, n, x < B(-87.0f));
  } else {
    const B scaled = y * BitCast<float>(BitCast<std::uint32_t>(biased) << 23);
    return xsimd::select(x < B(-87.0f), B(0.0f), scaled);
  }
}

// Loads p into a register that the compiler must keep as such. Zen 3 loads at
// most two 256-bit operands per cycle; folded into the FMAs (GCC's choice), each
// q vector is loaded once per key of the register tile, and the score loop
// becomes load-bound (10 loads per 8 FMAs with 4 x 2 tiles) instead of FMA-bound.
template <class Arch>
__attribute__((always_inline)) inline FloatBatch<Arch> LoadInRegister(const float* p) {
  typename FloatBatch<Arch>::register_type raw = FloatBatch<Arch>::load_unaligned(p);
  PinToVectorRegister(raw);
  return FloatBatch<Arch>(raw);
}

// Requests one line for WarmCursor: into L2 as every other request of the
// kernels (RequestLine), for writing when the driver will write it.
struct RequestWarmLine {
  // Must be inlined, as PrefetchRows.
  __attribute__((always_inline)) void operator()(const std::byte* line, bool write) const {
    if (write) {
      __builtin_prefetch(line, 1, 2);
    } else {
      RequestLine(line);
    }
  }
};

template <class Arch, class Tag>
struct Attender {
  using B = FloatBatch<Arch>;
  using Stored = typename Tag::Stored;
  static constexpr std::int64_t kN = static_cast<std::int64_t>(B::size);
  // Keys per register tile of the score loop with 4 query rows: 4 x 3
  // accumulators + 3 K vectors + 1 q vector fill AVX2's 16 registers. 12
  // independent FMA chains keep both FMA pipes busy (latency 4 x 2 per cycle
  // needs 8) with slack for the reductions between tiles; 4 x 2 left the score
  // step at ~55% of the FMA peak (T 1024 f16 decode, Zen 3). f16/bf16 only: for
  // f32 K, whose rows are twice as many lines, 4 x 3 made decode from DRAM 3-12%
  // slower (T 4k / 16k, 1 thread) and gained nothing in cache.
  // AVX-512 (16 lanes, 32 registers): 4 x 4 accumulators + 4 K vectors + 1 q
  // vector use 21 registers, 16 chains, and one TransposeAdd of 16 batches reduces the
  // whole tile (4 x 2 with a horizontal add per accumulator before; not timed:
  // no AVX-512 host at hand).
  static constexpr int kScoreKeys = kN == 16 ? 4 : kN == 8 && sizeof(Stored) == 2 ? 3 : 2;
  // Dv vectors per pass of step (3) with 4 rows: 4 x 2 accumulators are the 8
  // chains two FMA pipes of latency 4 need on AVX2 (4 x 3 and 2 x 4 were no
  // faster); AVX-512's 32 registers hold 4 x 4.
  static constexpr int kAccChunks = kN == 16 ? 4 : 2;
  // Prefill-sized tiles (>= kWideTileRows rows) on AVX2 run both steps on 6-row
  // register tiles, 6 x 2 accumulators + 2 K (or V) vectors + 1 q (or p): each
  // converted K/V vector then serves 6 FMAs instead of 4 (docs/attention_tuning.md,
  // "6-row prefill tiles"). 0: not used on this tier (not measured on SSE4.2 or AVX-512).
  static constexpr int kWideRows = kN == 8 ? 6 : 0;
  static constexpr std::int64_t kWideTileRows = 16;

  // sums[a] = the sum of acc[a]'s lanes, for N accumulators. Transpose-add: kN
  // accumulators reduce to one batch of kN sums; a last, partial group is padded
  // by repeating its accumulators.
  static constexpr std::size_t SumsSize(int n) {
    return static_cast<std::size_t>((n + kN - 1) / kN * kN);
  }
  template <int N>
  __attribute__((always_inline)) static void SumLanes(const B* acc, float* sums) {
    constexpr int kGroup = static_cast<int>(kN);
    if constexpr (kN == 4 || kN == 8 || kN == 16) {
#pragma GCC unroll 16
      for (int g = 0; g < N; g += kGroup) {
        if (g + kGroup <= N) {
          TransposeAdd<Arch>(acc + g).store_aligned(sums + g);
        } else {
          B part[static_cast<std::size_t>(kGroup)];
#pragma GCC unroll 16
          for (int i = 0; i < kGroup; ++i) part[i] = acc[g + i % (N - g)];
          TransposeAdd<Arch>(part).store_aligned(sums + g);
        }
      }
    } else {
#pragma GCC unroll 32
      for (int a = 0; a < N; ++a) sums[a] = ReduceAdd<Arch>(acc[a]);
    }
  }

  // out[r * out_stride + j] = the sum of acc[r * K + j]'s lanes, times
  // row_scale[r] when row_scale is not null. A 4 x 4 tile of 16 lanes goes from
  // the transpose-add's register straight to the rows (StoreQuarters).
  template <int R, int K>
  __attribute__((always_inline)) static void StoreSums(const B* acc, float* out,
                                                       std::int64_t out_stride,
                                                       const float* row_scale) {
    if constexpr (kN == 16 && R == 4 && K == 4) {
      StoreQuarters<Arch>(TransposeAdd<Arch>(acc), out, out_stride, row_scale);
    } else {
      alignas(64) float sums[SumsSize(R * K)];
      SumLanes<R * K>(acc, sums);
      for (int r = 0; r < R; ++r) {
        const float sc = row_scale != nullptr ? row_scale[r] : 1.0f;
        for (int j = 0; j < K; ++j) out[r * out_stride + j] = sums[r * K + j] * sc;
      }
    }
  }

  // out[r * out_stride + j] = q_r . k_j for R rows (q_stride apart) and K keys.
  // R x K independent accumulators hide the FMA latency; each K vector is
  // converted once and used by all R rows.
  template <int R, int K>
  __attribute__((always_inline)) static void Dots(const float* q, std::int64_t q_stride,
                                                  const Stored* k, std::int64_t k_stride,
                                                  std::int64_t d, float* out,
                                                  std::int64_t out_stride) {
    B acc[static_cast<std::size_t>(R * K)];
#pragma GCC unroll 32
    for (int a = 0; a < R * K; ++a) acc[a] = B(0.0f);
    const std::int64_t d_vec = d - d % kN;
    for (std::int64_t c = 0; c < d_vec; c += kN) {
      B kv[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) kv[j] = LoadAsFloat<Arch, Tag>(k + j * k_stride + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const B qv = LoadInRegister<Arch>(q + r * q_stride + c);
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) acc[r * K + j] = xsimd::fma(qv, kv[j], acc[r * K + j]);
      }
    }
    if (d_vec == d) {
      StoreSums<R, K>(acc, out, out_stride, nullptr);
      return;
    }
    alignas(64) float sums[SumsSize(R * K)];
    SumLanes<R * K>(acc, sums);
    for (std::int64_t c = d_vec; c < d; ++c) {
      for (int j = 0; j < K; ++j) {
        const float kc = LoadScalarAsFloat<Tag>(k + j * k_stride + c);
        for (int r = 0; r < R; ++r) sums[r * K + j] += q[r * q_stride + c] * kc;
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < K; ++j) out[r * out_stride + j] = sums[r * K + j];
    }
  }

  // scale * Dots over bf16 keys as stored and queries rounded to bf16
  // (Bf16Dot, the AVX-512 tier's BF16 unit): one vdpbf16ps per 32 products
  // instead of a widening and two FMAs. q_stride in bf16 values; d a multiple of 32.
  template <int R, int K>
  __attribute__((always_inline)) static void DotsBf16(const std::uint16_t* q, std::int64_t q_stride,
                                                      const Stored* k, std::int64_t k_stride,
                                                      std::int64_t d, float scale, float* out,
                                                      std::int64_t out_stride) {
    using Dot = Bf16Dot<Arch>;
    B acc[static_cast<std::size_t>(R * K)];
#pragma GCC unroll 32
    for (int a = 0; a < R * K; ++a) acc[a] = B(0.0f);
    for (std::int64_t c = 0; c < d; c += Dot::kLanes) {
      decltype(Dot::Load(k)) kv[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) kv[j] = Dot::Load(k + j * k_stride + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        auto qv = Dot::Load(q + r * q_stride + c);
        PinToVectorRegister(qv);
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) acc[r * K + j] = Dot::DotAdd(acc[r * K + j], qv, kv[j]);
      }
    }
    float row_scale[static_cast<std::size_t>(R)];
    for (int r = 0; r < R; ++r) row_scale[r] = scale;
    StoreSums<R, K>(acc, out, out_stride, row_scale);
  }

  // Whether this unit computes attention over Tag with bf16 products: queries
  // and softmax weights rounded to bf16 (RoundQuery, PairSums).
  static constexpr bool kBf16Products = kBf16Dot<Arch> && std::is_same_v<Tag, BF16Tag>;

  // Whether a tile's scores go through DotsBf16: a decode-sized tile (prefill
  // ones convert K to f32 once per block and use every FMA of a wide tile) over
  // bf16 K on a unit with bf16 dot products. Its queries are then held as bf16
  // (Attend), which is what this costs in accuracy: docs/kernels.md.
  static bool Bf16Scores(const AttendTile& t, std::int64_t rows_total) {
    if constexpr (kBf16Products) {
      return rows_total < kDequantTileRows && t.d % Bf16Dot<Arch>::kLanes == 0;
    } else {
      return false;
    }
  }

  // The current block's K and V rows, requested whole just before step (1)
  // reads each K row: the V rows are on their way while the scores are
  // computed, and a K row's lines are all in flight at once. Prefill-sized
  // tiles need this most: their step (3) walks V chunk by chunk across rows,
  // which the hardware prefetchers do not run ahead of. Decode tiles also
  // request the next block's K, and their own V rows a few keys ahead, during
  // step (3) (AccumulateInOrder, PrefetchVAhead). Every request goes to L2
  // (RequestLine). What else was tried, and what each choice measured:
  // docs/attention_tuning.md.
  struct Prefetch {
    const Stored* k = nullptr;  // nullptr: nothing to fetch
    const Stored* v = nullptr;  // read only when dv > 0: dv 0 fetches K rows only
    std::int64_t k_stride = 0;
    std::int64_t v_stride = 0;
    std::int64_t rows = 0;
    std::int64_t d = 0;
    std::int64_t dv = 0;
  };

  // Must be inlined: GCC deems an out-of-line function that only prefetches
  // "const" and deletes its calls.
  __attribute__((always_inline)) static void PrefetchRows(const Prefetch& pf, std::int64_t j0,
                                                          std::int64_t count) {
    if (pf.k == nullptr) return;
    constexpr std::int64_t kPerLine = 64 / static_cast<std::int64_t>(sizeof(Stored));
    for (std::int64_t j = j0; j < j0 + count && j < pf.rows; ++j) {
      for (std::int64_t c = 0; c < pf.d; c += kPerLine) {
        RequestLine(pf.k + j * pf.k_stride + c);
      }
      for (std::int64_t c = 0; c < pf.dv; c += kPerLine) {
        RequestLine(pf.v + j * pf.v_stride + c);
      }
    }
  }

  // Decode's V step (AccumulateInOrder, AccumulatePairs) requests the V rows
  // kVAhead keys ahead of those it adds: from DRAM, the rows requested with the
  // block's K (Prefetch) had often not arrived by then (docs/attention_tuning.md,
  // "bf16 V in pair dot products"; 8 and 32 keys ahead measured slower since the
  // requests go to L2). Rows [j + kVAhead, + count) of the block's kb.
  static constexpr std::int64_t kVAhead = 16;
  __attribute__((always_inline)) static void PrefetchVAhead(const Stored* v, std::int64_t v_stride,
                                                            std::int64_t j, std::int64_t count,
                                                            std::int64_t kb, std::int64_t dv) {
    constexpr std::int64_t kPerLine = 64 / static_cast<std::int64_t>(sizeof(Stored));
    for (std::int64_t q = j + kVAhead; q < j + kVAhead + count && q < kb; ++q) {
      for (std::int64_t c = 0; c < dv; c += kPerLine) RequestLine(v + q * v_stride + c);
    }
  }

  // Scores of R rows against the kb keys of a block; kBf16: q holds unscaled
  // bf16 rows (DotsBf16, which applies scale), q_stride still in floats.
  template <int R, int K, bool kBf16 = false>
  static void ScoreRows(const float* q, std::int64_t q_stride, const Stored* k,
                        std::int64_t k_stride, std::int64_t kb, std::int64_t d, float* s,
                        std::int64_t s_stride, const Prefetch& pf, float scale = 1.0f) {
    ForEachKeyTile<K>(
        kb, [&](std::int64_t j, std::int64_t keys) { PrefetchRows(pf, j, keys); },
        [&]<int Kt>(std::int64_t j) {
          if constexpr (kBf16) {
            DotsBf16<R, Kt>(reinterpret_cast<const std::uint16_t*>(q), 2 * q_stride,
                            k + j * k_stride, k_stride, d, scale, s + j, s_stride);
          } else {
            Dots<R, Kt>(q, q_stride, k + j * k_stride, k_stride, d, s + j, s_stride);
          }
        });
  }

  // p = -0.0 marks a hidden key (Softmax): its V must not reach the row, even
  // as 0 * NaN. Only blocks that hold such keys pay for the test.
  __attribute__((always_inline)) static bool IsHidden(float p) {
    std::uint32_t bits;
    __builtin_memcpy(&bits, &p, sizeof bits);
    return bits == 0x80000000u;
  }

  // acc_r = acc_r * alpha_r + sum_j p[r][j] v_j over VC vectors of Dv at a time;
  // the R x VC accumulators stay in registers for the whole block. kSkipHidden:
  // the block has hidden keys, skip their terms.
  template <int R, int VC, bool kSkipHidden>
  __attribute__((always_inline)) static std::int64_t AccumulateChunks(
      const float* p, std::int64_t p_stride, const float* alpha, const Stored* v,
      std::int64_t v_stride, std::int64_t kb, std::int64_t c, std::int64_t dv, float* acc,
      std::int64_t acc_stride) {
    for (; c + VC * kN <= dv; c += VC * kN) {
      B a[static_cast<std::size_t>(R * VC)];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const B scale(alpha[r]);
#pragma GCC unroll 16
        for (int x = 0; x < VC; ++x) {
          a[r * VC + x] = B::load_unaligned(acc + r * acc_stride + c + x * kN) * scale;
        }
      }
      for (std::int64_t j = 0; j < kb; ++j) {
        const Stored* vj = v + j * v_stride + c;
        B vv[static_cast<std::size_t>(VC)];
#pragma GCC unroll 16
        for (int x = 0; x < VC; ++x) vv[x] = LoadAsFloat<Arch, Tag>(vj + x * kN);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          if (kSkipHidden && IsHidden(p[r * p_stride + j])) continue;
          const B pr(p[r * p_stride + j]);
#pragma GCC unroll 16
          for (int x = 0; x < VC; ++x) a[r * VC + x] = xsimd::fma(pr, vv[x], a[r * VC + x]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int x = 0; x < VC; ++x)
          a[r * VC + x].store_unaligned(acc + r * acc_stride + c + x * kN);
      }
    }
    return c;
  }

  // acc_r = acc_r alpha_r + sum_j p[r][j] v_j for the R rows of a decode-sized
  // tile, walking V in address order: a few keys at a time (kInOrderKeys), each
  // V vector loaded once and added into every row's accumulator, which stays in
  // memory (L1) instead of registers. AccumulateChunks' walk, a column chunk at
  // a time across all kb rows, is an order the hardware prefetchers do not
  // follow, so decode from DRAM waited on V; in cache this walk's extra loads
  // and stores make it slower (docs/attention_tuning.md, "V in address order").
  // next: K rows of the following block, requested a trip's keys at a time as
  // the keys go by, so that K arrives while V is summed.
  template <int R>
  static void AccumulateInOrder(const float* p, std::int64_t p_stride, const float* alpha,
                                const Stored* v, std::int64_t v_stride, std::int64_t kb,
                                std::int64_t dv, float* acc, std::int64_t acc_stride,
                                const Prefetch& next) {
    const std::int64_t dv_vec = dv / kN * kN;
    for (int r = 0; r < R; ++r) {
      float* a = acc + r * acc_stride;
      const B scale(alpha[r]);
      for (std::int64_t c = 0; c < dv_vec; c += kN) {
        (B::load_unaligned(a + c) * scale).store_unaligned(a + c);
      }
      for (std::int64_t c = dv_vec; c < dv; ++c) a[c] *= alpha[r];
    }
    std::int64_t j = 0;
    for (; j + kInOrderKeys <= kb; j += kInOrderKeys) {
      AddKeys<R, kInOrderKeys>(p, p_stride, v, v_stride, j, kb, dv, acc, acc_stride, next);
    }
    if constexpr (kInOrderKeys > 2) {
      if (j + 2 <= kb) {
        AddKeys<R, 2>(p, p_stride, v, v_stride, j, kb, dv, acc, acc_stride, next);
        j += 2;
      }
    }
    if (j < kb) AddKeys<R, 1>(p, p_stride, v, v_stride, j, kb, dv, acc, acc_stride, next);
  }

  // Keys per trip of AccumulateInOrder: each trip loads and stores every row's
  // accumulator once, so more keys a trip means fewer of those per FMA. 4 on
  // AVX2 and AVX-512; 8 spilled on AVX-512, and 4 made SSE4.2's f32 step slower
  // (docs/attention_tuning.md, "Four keys a trip").
  static constexpr int kInOrderKeys = kN >= 8 ? 4 : 2;

  // One trip of AccumulateInOrder: keys j .. j + K - 1 added into the R rows.
  template <int R, int K>
  __attribute__((always_inline)) static void AddKeys(
      const float* p, std::int64_t p_stride, const Stored* v, std::int64_t v_stride, std::int64_t j,
      std::int64_t kb, std::int64_t dv, float* acc, std::int64_t acc_stride, const Prefetch& next) {
    const std::int64_t dv_vec = dv / kN * kN;
    PrefetchRows(next, j, K);
    PrefetchVAhead(v, v_stride, j, K, kb, dv);
    B w[static_cast<std::size_t>(R * K)];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i) w[r * K + i] = B(p[r * p_stride + j + i]);
    }
    const Stored* v0 = v + j * v_stride;
    for (std::int64_t c = 0; c < dv_vec; c += kN) {
      B x[static_cast<std::size_t>(K)];
#pragma GCC unroll 4
      for (int i = 0; i < K; ++i) x[i] = LoadAsFloat<Arch, Tag>(v0 + i * v_stride + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        float* a = acc + r * acc_stride + c;
        B sum = B::load_unaligned(a);
#pragma GCC unroll 4
        for (int i = 0; i < K; ++i) sum = xsimd::fma(w[r * K + i], x[i], sum);
        sum.store_unaligned(a);
      }
    }
    for (std::int64_t c = dv_vec; c < dv; ++c) {
      for (int r = 0; r < R; ++r) {
        float& a = acc[r * acc_stride + c];
        for (int i = 0; i < K; ++i) {
          a += p[r * p_stride + j + i] * LoadScalarAsFloat<Tag>(v0 + i * v_stride + c);
        }
      }
    }
  }

  // AccumulateInOrder over bf16 V on a unit with bf16 dot products: four keys
  // at a time, their V rows interleaved in pairs (Bf16Dot::Interleave) and
  // added with one vdpbf16ps per pair and 16 values, the weights of a pair
  // rounded to bf16 and broadcast as one word, instead of a widening and an FMA
  // per key and 16 values. The row accumulators take the pairs' value order for
  // the block and are put back after it. p: the rows' weights, packed in place
  // (Bf16Dot::PackPairs); no key of the block is hidden; dv a multiple of 32.
  template <int R>
  static void AccumulatePairs(float* p, std::int64_t p_stride, const float* alpha, const Stored* v,
                              std::int64_t v_stride, std::int64_t kb, std::int64_t dv, float* acc,
                              std::int64_t acc_stride, const Prefetch& next) {
    using Dot = Bf16Dot<Arch>;
    using Bits = typename Dot::Bits;
    constexpr std::int64_t kChunk = Dot::kLanes;
    for (int r = 0; r < R; ++r) {
      Dot::PackPairs(p + r * p_stride, kb);
      float* a = acc + r * acc_stride;
      const B scale(alpha[r]);
      for (std::int64_t c = 0; c < dv; c += kChunk) {
        B lo;
        B hi;
        Dot::ToPairOrder(B::load_unaligned(a + c) * scale, B::load_unaligned(a + c + kN) * scale,
                         lo, hi);
        lo.store_unaligned(a + c);
        hi.store_unaligned(a + c + kN);
      }
    }
    const auto* w = reinterpret_cast<const std::uint32_t*>(p);  // word j / 2: keys j, j + 1
    std::int64_t j = 0;
    for (; j + 4 <= kb; j += 4) {
      PrefetchRows(next, j, 4);
      PrefetchVAhead(v, v_stride, j, 4, kb, dv);
      Bits w01[static_cast<std::size_t>(R)];
      Bits w23[static_cast<std::size_t>(R)];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        w01[r] = Dot::BroadcastPair(w[r * p_stride + j / 2]);
        w23[r] = Dot::BroadcastPair(w[r * p_stride + j / 2 + 1]);
      }
      const Stored* v0 = v + j * v_stride;
      for (std::int64_t c = 0; c < dv; c += kChunk) {
        Bits lo01;
        Bits hi01;
        Bits lo23;
        Bits hi23;
        Dot::Interleave(Dot::Load(v0 + c), Dot::Load(v0 + v_stride + c), lo01, hi01);
        Dot::Interleave(Dot::Load(v0 + 2 * v_stride + c), Dot::Load(v0 + 3 * v_stride + c), lo23,
                        hi23);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          float* a = acc + r * acc_stride + c;
          Dot::DotAdd(Dot::DotAdd(B::load_unaligned(a), lo01, w01[r]), lo23, w23[r])
              .store_unaligned(a);
          Dot::DotAdd(Dot::DotAdd(B::load_unaligned(a + kN), hi01, w01[r]), hi23, w23[r])
              .store_unaligned(a + kN);
        }
      }
    }
    // One or two pairs left; a last odd key pairs with zeros (its partner's
    // weight is 0 too, PackPairs).
    for (; j < kb; j += 2) {
      PrefetchRows(next, j, 2);
      Bits w01[static_cast<std::size_t>(R)];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) w01[r] = Dot::BroadcastPair(w[r * p_stride + j / 2]);
      const Stored* v0 = v + j * v_stride;
      const bool odd = j + 1 == kb;
      for (std::int64_t c = 0; c < dv; c += kChunk) {
        Bits lo01;
        Bits hi01;
        Dot::Interleave(Dot::Load(v0 + c), odd ? Dot::Zero() : Dot::Load(v0 + v_stride + c), lo01,
                        hi01);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          float* a = acc + r * acc_stride + c;
          Dot::DotAdd(B::load_unaligned(a), lo01, w01[r]).store_unaligned(a);
          Dot::DotAdd(B::load_unaligned(a + kN), hi01, w01[r]).store_unaligned(a + kN);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float* a = acc + r * acc_stride;
      for (std::int64_t c = 0; c < dv; c += kChunk) {
        B n0;
        B n1;
        Dot::FromPairOrder(B::load_unaligned(a + c), B::load_unaligned(a + c + kN), n0, n1);
        n0.store_unaligned(a + c);
        n1.store_unaligned(a + c + kN);
      }
    }
  }

  template <int R, int VC, bool kSkipHidden>
  static void AccumulateRows(const float* p, std::int64_t p_stride, const float* alpha,
                             const Stored* v, std::int64_t v_stride, std::int64_t kb,
                             std::int64_t dv, float* acc, std::int64_t acc_stride) {
    std::int64_t c = AccumulateChunks<R, VC, kSkipHidden>(p, p_stride, alpha, v, v_stride, kb, 0,
                                                          dv, acc, acc_stride);
    c = AccumulateChunks<R, 1, kSkipHidden>(p, p_stride, alpha, v, v_stride, kb, c, dv, acc,
                                            acc_stride);
    for (; c < dv; ++c) {
      for (int r = 0; r < R; ++r) {
        float sum = acc[r * acc_stride + c] * alpha[r];
        for (std::int64_t j = 0; j < kb; ++j) {
          if (kSkipHidden && IsHidden(p[r * p_stride + j])) continue;
          sum += p[r * p_stride + j] * LoadScalarAsFloat<Tag>(v + j * v_stride + c);
        }
        acc[r * acc_stride + c] = sum;
      }
    }
  }

  // Masks the scores of one block; returns false when no row sees any of its keys.
  static bool Causal(const AttendTile& t) {
    return t.mask_kind == MaskKind::kCausal || t.mask_kind == MaskKind::kSlidingWindow;
  }
  static bool Windowed(const AttendTile& t) {
    return t.mask_kind == MaskKind::kWindow || t.mask_kind == MaskKind::kSlidingWindow;
  }

  // True when no row of the tile sees any key of the block [tb, tb + kb).
  static bool BlockHidden(const AttendTile& t, std::int64_t tb, std::int64_t kb) {
    if (t.row_lo != nullptr) {
      for (std::int64_t i = 0; i < t.rows; ++i) {
        if (t.row_lo[i] < t.row_hi[i] && t.row_lo[i] < tb + kb && t.row_hi[i] > tb) return false;
      }
      return true;
    }
    if (Causal(t) && tb > t.pos0 + t.rows - 1) return true;            // after every row
    if (Windowed(t) && tb + kb - 1 <= t.pos0 - t.window) return true;  // before every window
    return false;
  }

  // Hides the keys of a row outside [lo, hi) (lo >= 0, hi <= kb): two fills the
  // compiler vectorises, rather than a test per key.
  static void HideOutside(float* sr, std::int64_t lo, std::int64_t hi, std::int64_t kb) {
    for (std::int64_t j = 0; j < lo && j < kb; ++j) sr[j] = kAttendNegInf;
    for (std::int64_t j = hi > lo ? hi : lo; j < kb; ++j) sr[j] = kAttendNegInf;
  }

  // Row ranges: only rows whose range does not cover the whole block are masked key by key.
  static void MaskRowRanges(const AttendTile& t, std::int64_t tb, std::int64_t kb, float* s) {
    for (std::int64_t i = 0; i < t.rows; ++i) {
      std::int64_t lo = t.row_lo[i] - tb;  // first visible j
      std::int64_t hi = t.row_hi[i] - tb;  // past the last one
      lo = lo < 0 ? 0 : lo;
      hi = hi > kb ? kb : hi;
      if (lo == 0 && hi == kb) continue;
      for (std::int64_t g = 0; g < t.heads; ++g) {
        float* sr = s + (g * t.rows + i) * t.block;
        HideOutside(sr, lo, hi, kb);
      }
    }
  }

  static bool MaskBlock(const AttendTile& t, std::int64_t tb, std::int64_t kb, float* s) {
    if (t.row_lo != nullptr) {
      MaskRowRanges(t, tb, kb, s);
      return true;
    }
    const bool causal = Causal(t);
    const bool windowed = Windowed(t);
    if (causal || windowed) {
      if (BlockHidden(t, tb, kb)) return false;
      const std::int64_t last_pos = t.pos0 + t.rows - 1;
      const bool all_visible =
          (!causal || tb + kb - 1 <= t.pos0) && (!windowed || tb > last_pos - t.window);
      if (!all_visible) {
        // Only diagonal and window-edge blocks get here.
        for (std::int64_t i = 0; i < t.rows; ++i) {
          const std::int64_t pos = t.pos0 + i;
          std::int64_t lo = windowed ? pos - t.window + 1 - tb : 0;  // first visible j
          std::int64_t hi = causal ? pos + 1 - tb : kb;              // past the last one
          lo = lo < 0 ? 0 : lo;
          hi = hi > kb ? kb : hi;
          for (std::int64_t g = 0; g < t.heads; ++g) {
            float* sr = s + (g * t.rows + i) * t.block;
            HideOutside(sr, lo, hi, kb);
          }
        }
      }
    } else if (t.mask_kind == MaskKind::kAdditive || t.mask_kind == MaskKind::kBoolean) {
      for (std::int64_t g = 0; g < t.heads; ++g) {
        for (std::int64_t i = 0; i < t.rows; ++i) {
          float* sr = s + (g * t.rows + i) * t.block;
          const std::int64_t base =
              g * t.mask_head_stride + i * t.mask_row_stride + tb * t.mask_key_stride;
          if (t.mask_kind == MaskKind::kAdditive) {
            const float* mk = static_cast<const float*>(t.mask) + base;
            for (std::int64_t j = 0; j < kb; ++j) {
              // -inf hides the key whatever its score (NaN + -inf would be NaN).
              const float bias = mk[j * t.mask_key_stride];
              sr[j] = bias == kAttendNegInf ? kAttendNegInf : sr[j] + bias;
            }
          } else {
            const auto* mk = static_cast<const std::uint8_t*>(t.mask) + base;
            for (std::int64_t j = 0; j < kb; ++j) {
              if (mk[j * t.mask_key_stride] == 0) sr[j] = kAttendNegInf;
            }
          }
        }
      }
    }
    return true;
  }

  // Online-softmax update of every row over one block's scores s (padded with
  // -inf to whole batches); s becomes p, alpha[r] the rescale of the old state.
  // NaN and Inf follow the float64 reference (docs/kernels.md) without a check in
  // the common path: a NaN score gives p = NaN, so l and acc become NaN and stay
  // so (a NaN the max let through only costs a wrong m for a row that is NaN
  // anyway). Only a row with no visible key so far, which would drop the block,
  // scans it for NaN. A hidden key (score -inf) gets p = -0.0, which
  // AccumulateRows<..., true> skips so that a NaN in its V cannot reach the row;
  // rows without one keep the plain exp. Returns whether any p is -0.0.
  //
  // Rows go kN at a time: one row alone is a chain of dependent steps (its max
  // across lanes, then exp(m_old - m_new), then the exps, then the sum across
  // lanes) too long for the out-of-order window to overlap with the next row's,
  // while kN rows share one transpose for their maxima, one exp for their alphas
  // and one transpose-add for their sums (docs/attention_tuning.md, "Prefill
  // overheads").
  static bool Softmax(const AttendTile& t, std::int64_t rows_total, std::int64_t kb, float* s,
                      float* alpha) {
    bool any_hidden = false;
    std::int64_t r = 0;
    for (; r + kN <= rows_total; r += kN) any_hidden |= SoftmaxRows(t, r, kb, s, alpha);
    for (; r < rows_total; ++r) {
      float* sr = s + r * t.block;
      bool row_hidden = false;
      const float block_max = ReduceMax<Arch>(ScanRow(sr, kb, row_hidden));
      const float m_old = t.m[r];
      const float m_new = block_max > m_old ? block_max : m_old;  // a NaN m_old sticks
      if (m_new == kAttendNegInf) {
        EmptyRow(t, r, kb, sr, alpha);
        any_hidden = true;
        continue;
      }
      alignas(64) float lanes[B::size];
      ExpNonPositive<Arch>(B(m_old - m_new)).store_aligned(lanes);
      alpha[r] = lanes[0];
      any_hidden |= row_hidden;
      t.l[r] = t.l[r] * alpha[r] + ReduceAdd<Arch>(ExpRow(sr, kb, m_new, row_hidden));
      t.m[r] = m_new;
    }
    return any_hidden;
  }

  // Rows r0 .. r0 + kN - 1 of Softmax, with the same results as one at a time:
  // the lane-wise maximum after the transpose keeps ReduceMax's order and ties.
  static bool SoftmaxRows(const AttendTile& t, std::int64_t r0, std::int64_t kb, float* s,
                          float* alpha) {
    const B neg_inf(kAttendNegInf);
    B rows[static_cast<std::size_t>(kN)];
    std::uint32_t hidden = 0;
    for (std::int64_t i = 0; i < kN; ++i) {
      bool row_hidden = false;
      rows[i] = ScanRow(s + (r0 + i) * t.block, kb, row_hidden);
      hidden |= static_cast<std::uint32_t>(row_hidden) << i;
    }
    Transpose<Arch>(rows);
    B block_max = rows[0];
#pragma GCC unroll 16
    for (std::int64_t c = 1; c < kN; ++c) {
      block_max = xsimd::select(rows[c] > block_max, rows[c], block_max);
    }
    const B m_old = B::load_unaligned(t.m + r0);
    const B m_new = xsimd::select(block_max > m_old, block_max, m_old);  // a NaN m_old sticks
    const auto empty = m_new == neg_inf;
    const B a = xsimd::select(empty, B(1.0f),
                              ExpNonPositive<Arch>(xsimd::select(empty, B(0.0f), m_old - m_new)));
    a.store_unaligned(alpha + r0);
    m_new.store_unaligned(t.m + r0);
    alignas(64) float mn[B::size];
    m_new.store_aligned(mn);
    std::uint32_t empty_rows = 0;
    for (std::int64_t i = 0; i < kN; ++i) {
      float* sr = s + (r0 + i) * t.block;
      if (mn[i] == kAttendNegInf) {
        empty_rows |= std::uint32_t{1} << i;
        rows[i] = B(0.0f);
        continue;
      }
      rows[i] = ExpRow(sr, kb, mn[i], ((hidden >> i) & 1U) != 0);
    }
    (B::load_unaligned(t.l + r0) * a + TransposeAdd<Arch>(rows)).store_unaligned(t.l + r0);
    for (std::int64_t i = 0; i < kN; ++i) {
      if (((empty_rows >> i) & 1U) != 0) EmptyRow(t, r0 + i, kb, s + (r0 + i) * t.block, alpha);
    }
    return hidden != 0 || empty_rows != 0;
  }

  // Pads a row's scores with -inf up to whole batches; returns the batch of
  // maxima over its keys, and whether one of them is hidden (-inf).
  __attribute__((always_inline)) static B ScanRow(float* sr, std::int64_t kb, bool& row_hidden) {
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    const std::int64_t kb_full = kb - kb % kN;  // padding lanes (>= kb) are never accumulated
    const B neg_inf(kAttendNegInf);
    for (std::int64_t j = kb; j < kb_pad; ++j) sr[j] = kAttendNegInf;
    B mx(kAttendNegInf);
    B lo(0.0f);  // min over the real keys: -inf iff one is hidden
    for (std::int64_t j = 0; j < kb_full; j += kN) {
      const B x = B::load_unaligned(sr + j);
      mx = xsimd::max(mx, x);
      lo = xsimd::min(lo, x);
    }
    row_hidden = xsimd::any(lo == neg_inf);
    for (std::int64_t j = kb_full; j < kb; ++j) row_hidden |= sr[j] == kAttendNegInf;
    if (kb_full < kb_pad) mx = xsimd::max(mx, B::load_unaligned(sr + kb_full));
    return mx;
  }

  // p = exp(s - m_new) over a row's keys in place (hidden keys -0.0); returns
  // the batch of their sums.
  __attribute__((always_inline)) static B ExpRow(float* sr, std::int64_t kb, float m_new,
                                                 bool row_hidden) {
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    const B neg_inf(kAttendNegInf);
    const B hidden_p(-0.0f);
    const B mn(m_new);
    B sum(0.0f);
    if (row_hidden) {
      for (std::int64_t j = 0; j < kb_pad; j += kN) {
        const B x = B::load_unaligned(sr + j);
        const B pj = xsimd::select(x == neg_inf, hidden_p, ExpNonPositive<Arch>(x - mn));
        pj.store_unaligned(sr + j);
        sum += pj;
      }
    } else {
      for (std::int64_t j = 0; j < kb_pad; j += kN) {
        const B pj = ExpNonPositive<Arch>(B::load_unaligned(sr + j) - mn);
        pj.store_unaligned(sr + j);
        sum += pj;
      }
    }
    return sum;
  }

  // A row that sees no key so far: it keeps its empty state (every p of the
  // block -0.0, alpha 1), unless a NaN hid from the max, which makes it NaN.
  static void EmptyRow(const AttendTile& t, std::int64_t r, std::int64_t kb, float* sr,
                       float* alpha) {
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    bool nan = false;
    for (std::int64_t j = 0; j < kb; ++j) nan |= sr[j] != sr[j];
    alpha[r] = nan ? __builtin_nanf("") : 1.0f;  // NaN: acc * alpha poisons acc
    if (nan) t.m[r] = t.l[r] = __builtin_nanf("");
    for (std::int64_t j = 0; j < kb_pad; j += kN) B(-0.0f).store_unaligned(sr + j);
  }

  // The tile's scratch as the block steps use it.
  struct Scratch {
    std::int64_t rows_total = 0;
    std::int64_t qd = 0;     // row stride of qs: D rounded up to 16
    float* qs = nullptr;     // [rows_total, qd] scaled queries (or bf16 ones, RoundQuery)
    float* s = nullptr;      // [rows_total, block] scores, then p
    float* alpha = nullptr;  // [rows_total]
  };

  // On a unit with bf16 dot products every tile over bf16 K rounds its queries
  // to bf16, whichever path its blocks take, so that the unit computes one
  // thing: attention of bf16(q) over the stored keys, the scale applied in f32
  // (queries that already were bf16 lose nothing). Decode tiles that take
  // DotsBf16 hold them packed in the first half of each row's floats and scale
  // the scores; the others hold bf16(q) * scale as f32.
  static void RoundQuery(const AttendTile& t, bool packed, const float* q, float* dst) {
    using Dot = Bf16Dot<Arch>;
    if (packed) {
      for (std::int64_t c = 0; c < t.d; c += Dot::kLanes) {
        Dot::Round(q + c, reinterpret_cast<std::uint16_t*>(dst) + c);
      }
      return;
    }
    Dot::RoundAndScale(q, t.scale, dst, t.d);
  }

  // Lays out the scratch, writes each query row through scale(q, dst) and
  // resets every row's softmax state (m = -inf, l = 0, acc = 0).
  template <class ScaleRow>
  static Scratch Begin(const AttendTile& t, const ScaleRow& scale) {
    Scratch w;
    w.rows_total = t.heads * t.rows;
    w.qd = (t.d + 15) / 16 * 16;
    w.qs = t.scratch;
    w.s = w.qs + w.rows_total * w.qd;
    w.alpha = w.s + w.rows_total * t.block;
    for (std::int64_t g = 0; g < t.heads; ++g) {
      for (std::int64_t i = 0; i < t.rows; ++i) {
        const std::int64_t qi = t.q_rows != nullptr ? t.q_rows[i] : i;
        scale(t.q + g * t.q_head_stride + qi * t.q_row_stride, w.qs + (g * t.rows + i) * w.qd);
      }
    }
    for (std::int64_t r = 0; r < w.rows_total; ++r) {
      t.m[r] = kAttendNegInf;
      t.l[r] = 0.0f;
      for (std::int64_t c = 0; c < t.dv; ++c) t.acc[r * t.acc_stride + c] = 0.0f;
    }
    return w;
  }

  // Calls block(run, tb, kb, next_kb) for each block of kb <= t.block keys, from
  // key tb, of each run's part of [t0, t1); next_kb: the keys of the block that
  // follows in the same run (0 for a run's last block). Each block first
  // requests its share of the tile's warm rows.
  template <class BlockStep>
  static void ForEachBlock(const AttendTile& t, const BlockStep& block) {
    WarmCursor<RequestWarmLine> warm(t);
    for (std::int64_t ri = 0; ri < t.run_count; ++ri) {
      const KvRun& run = t.runs[ri];
      const auto [first, end] = KeysOf(t, run);
      for (std::int64_t tb = first; tb < end; tb += t.block) {
        const std::int64_t kb = end - tb < t.block ? end - tb : t.block;
        const std::int64_t rest = end - tb - kb;
        warm.Step();
        block(run, tb, kb, rest < t.block ? rest : t.block);
      }
    }
  }

  static void Attend(const AttendTile& t) {
    // The same products as a scalar loop; written with batches because the
    // compiler, unsure that dst does not alias t.scale, reloads it per element.
    const B scale(t.scale);
    const bool packed = Bf16Scores(t, t.heads * t.rows);
    const Scratch w = Begin(t, [&](const float* q, float* dst) {
      if constexpr (kBf16Products) {
        RoundQuery(t, packed, q, dst);
        return;
      }
      std::int64_t c = 0;
      for (; c + kN <= t.d; c += kN) (B::load_unaligned(q + c) * scale).store_unaligned(dst + c);
      for (; c < t.d; ++c) dst[c] = q[c] * t.scale;
    });
    ForEachBlock(t, [&](const KvRun& run, std::int64_t tb, std::int64_t kb, std::int64_t next_kb) {
      const Stored* k = static_cast<const Stored*>(run.k) + (tb - run.begin) * run.k_stride;
      const Stored* v = static_cast<const Stored*>(run.v) + (tb - run.begin) * run.v_stride;
      const Prefetch pf{.k = k,
                        .v = v,
                        .k_stride = run.k_stride,
                        .v_stride = run.v_stride,
                        .rows = kb,
                        .d = t.d,
                        .dv = t.dv};
      const Prefetch next{.k = next_kb > 0 ? k + kb * run.k_stride : nullptr,
                          .k_stride = run.k_stride,
                          .rows = next_kb,
                          .d = t.d};
      Block(t, w.rows_total, w.qd, w.qs, w.s, w.alpha, k, run.k_stride, v, run.v_stride, tb, kb, pf,
            next, kBf16Products);
    });
  }

  // Where a prefill-sized tile's converted block lives (attend_tile.h,
  // DequantScratchFloats): past the tile's queries, scores and row factors; V
  // rows v_stride apart, then K key-major (KeyMajor), its columns kt_stride apart.
  struct ConvertedRows {
    float* v;
    std::int64_t v_stride;
    float* kt;
    std::int64_t kt_stride;
  };
  static ConvertedRows ConvertedScratch(const AttendTile& t, std::int64_t rows_total,
                                        std::int64_t qd) {
    float* const v = t.scratch + rows_total * (qd + t.block + 16);
    const std::int64_t v_stride = (t.dv + 15) / 16 * 16;
    return {v, v_stride, v + t.block * v_stride, (t.block + 15) / 16 * 16};
  }

  // kb rows of n stored values as f32 rows dst_stride apart.
  static void ToF32Rows(const Stored* src, std::int64_t stride, std::int64_t kb, std::int64_t n,
                        float* dst, std::int64_t dst_stride) {
    const std::int64_t n_vec = n - n % kN;
    for (std::int64_t j = 0; j < kb; ++j) {
      const Stored* row = src + j * stride;
      float* out = dst + j * dst_stride;
      for (std::int64_t c = 0; c < n_vec; c += kN) {
        LoadAsFloat<Arch, Tag>(row + c).store_unaligned(out + c);
      }
      for (std::int64_t c = n_vec; c < n; ++c) out[c] = LoadScalarAsFloat<Tag>(row + c);
    }
  }

  static void Block(const AttendTile& t, std::int64_t rows_total, std::int64_t qd, const float* qs,
                    float* s, float* alpha, const Stored* k, std::int64_t k_stride, const Stored* v,
                    std::int64_t v_stride, std::int64_t tb, std::int64_t kb, const Prefetch& pf,
                    const Prefetch& next, bool bf16_weights) {
    if (BlockHidden(t, tb, kb)) return;  // before spending any work
    if (rows_total >= kDequantTileRows) {
      // A prefill-sized tile (attend_tile.h): the block's K laid out key-major
      // and V converted to f32, once, into the scratch past the tile's part,
      // then the f32 steps. In place, every register tile of rows would convert
      // each K and V vector again (docs/attention_tuning.md, "The first AVX-512
      // host") and reduce each score across its lanes.
      using F32 = Attender<Arch, F32Tag>;
      const ConvertedRows to = ConvertedScratch(t, rows_total, qd);
      if constexpr (std::is_same_v<Tag, F32Tag>) {
        PrefetchRows(pf, 0, kb);  // V is read in place, in column chunks
      }
      KeyMajor<Arch>::template ToColumns<Tag>(k, k_stride, kb, t.d, to.kt, to.kt_stride);
      if constexpr (std::is_same_v<Tag, F32Tag>) {
        KeyMajorBlock(t, rows_total, qd, qs, s, alpha, to.kt, to.kt_stride, v, v_stride, tb, kb,
                      bf16_weights);
      } else {
        ToF32Rows(v, v_stride, kb, t.dv, to.v, to.v_stride);
        F32::KeyMajorBlock(t, rows_total, qd, qs, s, alpha, to.kt, to.kt_stride, to.v, to.v_stride,
                           tb, kb, bf16_weights);
      }
      return;
    }
    // Only the first row group prefetches: each K/V row is requested once.
    const Prefetch none;
    const bool bf16_scores = Bf16Scores(t, rows_total);
    ForEachRowTile<kWideRows, 2, kScoreKeys, 2>(
        rows_total, kWideTileRows, [&]<int R, int K>(std::int64_t r) {
          if constexpr (kBf16Products) {
            if (bf16_scores) {
              ScoreRows<R, K, true>(qs + r * qd, qd, k, k_stride, kb, t.d, s + r * t.block, t.block,
                                    r == 0 ? pf : none, t.scale);
              return;
            }
          }
          ScoreRows<R, K>(qs + r * qd, qd, k, k_stride, kb, t.d, s + r * t.block, t.block,
                          r == 0 ? pf : none);
        });
    Weigh(t, rows_total, s, alpha, v, v_stride, tb, kb, next, bf16_weights);
  }

  // A prefill-sized tile's block from K key-major (kt, KeyMajor::ToColumns) and V
  // as rows: the f32 tier's steps after its own scores. bf16_weights as Block's.
  static void KeyMajorBlock(const AttendTile& t, std::int64_t rows_total, std::int64_t qd,
                            const float* qs, float* s, float* alpha, const float* kt,
                            std::int64_t kt_stride, const Stored* v, std::int64_t v_stride,
                            std::int64_t tb, std::int64_t kb, bool bf16_weights) {
    KeyMajor<Arch>::Scores(rows_total, qs, qd, kt, kt_stride, kb, t.d, s, t.block);
    Weigh(t, rows_total, s, alpha, v, v_stride, tb, kb, Prefetch{}, bf16_weights);
  }

  // The steps of a block after its scores s: the mask, the online softmax and
  // the weighted sum of V into the rows' accumulators.
  static void Weigh(const AttendTile& t, std::int64_t rows_total, float* s, float* alpha,
                    const Stored* v, std::int64_t v_stride, std::int64_t tb, std::int64_t kb,
                    const Prefetch& next, bool bf16_weights) {
    if (!MaskBlock(t, tb, kb, s)) return;
    const bool any_hidden = Softmax(t, rows_total, kb, s, alpha);
    const bool pairs = PairSums(t, rows_total, any_hidden);
    if (bf16_weights && !pairs) RoundWeights(t, rows_total, kb, s);
    if (any_hidden) {
      Accumulate<true>(t, rows_total, s, alpha, v, v_stride, kb);
    } else {
      Accumulate<false>(t, rows_total, s, alpha, v, v_stride, kb, next, pairs);
    }
  }

  // The bf16 V rule of a unit with bf16 dot products (docs/kernels.md, "bf16 V
  // sums"): every tile over bf16 V weighs it with the softmax weights rounded
  // to bf16, whichever path a block takes; l keeps the unrounded sum. Where the
  // pair dot products apply (decode tiles, no hidden key, Dv a multiple of 32)
  // AccumulatePairs rounds them as it packs them; elsewhere RoundWeights rounds
  // s in place for the f32 steps.
  static bool PairSums(const AttendTile& t, std::int64_t rows_total, bool any_hidden) {
    if constexpr (kBf16Products) {
      return !any_hidden && rows_total < kWideTileRows && t.dv % Bf16Dot<Arch>::kLanes == 0;
    } else {
      return false;
    }
  }
  static void RoundWeights(const AttendTile& t, std::int64_t rows_total, std::int64_t kb,
                           float* s) {
    if constexpr (kBf16Dot<Arch>) {
      for (std::int64_t r = 0; r < rows_total; ++r) {
        Bf16Dot<Arch>::RoundAndScale(s + r * t.block, 1.0f, s + r * t.block, kb);
      }
    }
  }

  // pairs: AccumulatePairs (PairSums), which packs the weights in s.
  template <bool kSkipHidden>
  static void Accumulate(const AttendTile& t, std::int64_t rows_total, float* s, const float* alpha,
                         const Stored* v, std::int64_t v_stride, std::int64_t kb,
                         const Prefetch& next = {}, bool pairs = false) {
    if (!kSkipHidden && rows_total < kWideTileRows) {
      const Prefetch none;
      ForEachRowTile<0, 1, 1, 1>(rows_total, 0, [&]<int R, int>(std::int64_t r) {
        float* p = s + r * t.block;
        float* acc = t.acc + r * t.acc_stride;
        const Prefetch& ahead = r == 0 ? next : none;
        if constexpr (kBf16Products) {
          if (pairs) {
            AccumulatePairs<R>(p, t.block, alpha + r, v, v_stride, kb, t.dv, acc, t.acc_stride,
                               ahead);
            return;
          }
        }
        AccumulateInOrder<R>(p, t.block, alpha + r, v, v_stride, kb, t.dv, acc, t.acc_stride,
                             ahead);
      });
      return;
    }
    ForEachRowTile<kWideRows, 2, kAccChunks, 2>(
        rows_total, kWideTileRows, [&]<int R, int VC>(std::int64_t r) {
          AccumulateRows<R, VC, kSkipHidden>(s + r * t.block, t.block, alpha + r, v, v_stride, kb,
                                             t.dv, t.acc + r * t.acc_stride, t.acc_stride);
        });
  }
};

// Quantized K/V (attend_quant-inl.h, which every per-ISA unit includes).
template <class Arch>
void AttendQuantized(const AttendTile& tile) noexcept;

template <class Arch>
void AttendFor(const AttendTile& tile) noexcept {
  switch (tile.k_dtype) {
    case DType::kF32:
      Attender<Arch, F32Tag>::Attend(tile);
      return;
    case DType::kF16:
      Attender<Arch, F16Tag>::Attend(tile);
      return;
    case DType::kBF16:
      Attender<Arch, BF16Tag>::Attend(tile);
      return;
    case DType::kI8:
    case DType::kI4:
      AttendQuantized<Arch>(tile);
      return;
    case DType::kI4H:
      std::terminate();  // the driver hands rotated rows over as kI4 (attend_tile.h)
  }
}

template <class Arch>
void FillAttend(KernelTable& table) {
  table.attend = AttendFor<Arch>;
}

}  // namespace
}  // namespace ringkv::kernels
