#pragma once
// The attend kernel (attend-inl.h) over quantized K/V rows (dtype.h), read in
// place: no dequantised copy. Masking and the online softmax are the float
// kernel's; what differs is how the scales enter:
//   K int8:  s_j = (q . q8_j) * scale_j          one multiply per key and row,
//                                                after the dot
//   K int4:  q . k_j = sum_g scale_jg (q_g . q4_jg), the nibbles widened and
//            scaled in registers once per key and shared by the tile's rows
//   V int8:  acc += (p_j * scale_j) q8_j         the scale folded into the
//                                                softmax weight (l keeps p_j)
//   V int4:  acc += p_j (scale_jg q4_jg)         scaled in registers per group
// int4 loads split a byte run into its low nibbles (even values) and high
// nibbles (odd values); the kernel keeps the queries (int4 K) and the
// accumulator (int4 V) in that order within each span of 2 * batch values, so no
// lane shuffles are needed, and puts the accumulator back in order at the end.
// Decode tiles (fewer than kDequantTileRows rows) take both steps in integers
// instead (I16Dot, pmaddwd: twice the multiply-adds of an f32 FMA on the same
// port), see "Integer decode" below.
// Everything lives in an anonymous namespace (internal linkage, see
// simd_compat-inl.h).
#include <climits>
#include <cstdint>

#include "attend-inl.h"
#include "quantize-inl.h"

namespace ringkv::kernels {
namespace {

template <class Arch, DType kK, DType kV>
struct QuantAttender {
  using B = FloatBatch<Arch>;
  using Float = Attender<Arch, F32Tag>;  // masking and the online softmax
  static constexpr std::int64_t kN = static_cast<std::int64_t>(B::size);
  static constexpr std::int64_t kSpan = 2 * kN;  // values of one int4 load (kN bytes)
  static constexpr std::int64_t kGroup = kI4Group;
  static_assert(kGroup % kSpan == 0, "an int4 span must not straddle a scale group");
  // Keys per register tile with 4 rows: int8 as f16 (4 x 3 accumulators + 3 K
  // vectors + q fill AVX2's 16 registers); an int4 key is two vectors per span.
  static constexpr int kScoreKeys = kK == DType::kI8 && kN == 8 ? 3 : 2;
  // Prefill-sized tiles take the float kernel's 6-row register tiles (AVX2), so
  // each widened K or V vector serves 6 rows: 6 x 2 accumulators for int8 keys,
  // 6 x 1 for int4 keys (two vectors per span), 6 x 2 batches of V either way.
  static constexpr int kWideScoreKeys = kK == DType::kI8 ? 2 : 1;

  static float Scale(const std::uint8_t* p) { return LoadQuantScale(p); }

  // out[r * out_stride + j] = q_r . k_j for R rows and K keys (rows of k_stride bytes).
  template <int R, int K>
  __attribute__((always_inline)) static void Dots(const float* q, std::int64_t q_stride,
                                                  const std::uint8_t* k, std::int64_t k_stride,
                                                  std::int64_t d, float* out,
                                                  std::int64_t out_stride) {
    constexpr int kRK = R * K;
    B acc[static_cast<std::size_t>(kRK)];
#pragma GCC unroll 32
    for (int a = 0; a < kRK; ++a) acc[a] = B(0.0f);
    alignas(64) float sums[static_cast<std::size_t>((kRK + kN - 1) / kN * kN)];
    if constexpr (kK == DType::kI8) {
      const std::int64_t d_vec = d - d % kN;
      for (std::int64_t c = 0; c < d_vec; c += kN) {
        B kv[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) kv[j] = LoadI8AsFloat<Arch>(k + j * k_stride + c);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const B qv = LoadInRegister<Arch>(q + r * q_stride + c);
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) acc[r * K + j] = xsimd::fma(qv, kv[j], acc[r * K + j]);
        }
      }
      Float::template SumLanes<kRK>(acc, sums);
      for (std::int64_t c = d_vec; c < d; ++c) {
        for (int j = 0; j < K; ++j) {
          const auto kc = static_cast<float>(static_cast<std::int8_t>(k[j * k_stride + c]));
          for (int r = 0; r < R; ++r) sums[r * K + j] += q[r * q_stride + c] * kc;
        }
      }
      for (int j = 0; j < K; ++j) {
        const float sc = Scale(k + j * k_stride + d);
        for (int r = 0; r < R; ++r) out[r * out_stride + j] = sums[r * K + j] * sc;
      }
    } else {
      // d % kGroup == 0; q is in span order (even values, then odd ones).
      for (std::int64_t c = 0; c < d; c += kSpan) {
        const std::int64_t scale_at = d / 2 + c / kGroup * 4;
        B even[static_cast<std::size_t>(K)];
        B odd[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) {
          const std::uint8_t* row = k + j * k_stride;
          LoadI4Scaled<Arch>(row + c / 2, Scale(row + scale_at), even[j], odd[j]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const B qe = LoadInRegister<Arch>(q + r * q_stride + c);
          const B qo = LoadInRegister<Arch>(q + r * q_stride + c + kN);
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) {
            acc[r * K + j] = xsimd::fma(qe, even[j], acc[r * K + j]);
            acc[r * K + j] = xsimd::fma(qo, odd[j], acc[r * K + j]);
          }
        }
      }
      Float::template SumLanes<kRK>(acc, sums);
      for (int r = 0; r < R; ++r) {
        for (int j = 0; j < K; ++j) out[r * out_stride + j] = sums[r * K + j];
      }
    }
  }

  // The block's K and V rows requested whole before the scores read them (see
  // the float kernel's Prefetch): bytes, so a quantized row is 1/2 or 1/4 the lines.
  struct Prefetch {
    const std::uint8_t* k = nullptr;  // nullptr: nothing to fetch
    const std::uint8_t* v = nullptr;
    std::int64_t k_stride = 0;
    std::int64_t v_stride = 0;
    std::int64_t rows = 0;
    std::int64_t k_bytes = 0;
    std::int64_t v_bytes = 0;
  };

  __attribute__((always_inline)) static void PrefetchRows(const Prefetch& pf, std::int64_t j0,
                                                          std::int64_t count) {
    if (pf.k == nullptr) return;
    const std::int64_t end = j0 + count < pf.rows ? j0 + count : pf.rows;
    if (j0 >= end) return;
    const auto line = [](const std::uint8_t* p) {
      return reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(p) &
                                                   ~std::uintptr_t{63});
    };
    // Rows with gaps between them: each row's lines, and its last byte, where
    // the scales may start a new line.
    const auto each_row = [j0, end](const std::uint8_t* base, std::int64_t stride,
                                    std::int64_t bytes) {
      for (std::int64_t j = j0; j < end; ++j) {
        const std::uint8_t* r = base + j * stride;
        for (std::int64_t c = 0; c < bytes; c += 64) RequestLine(r + c);
        RequestLine(r + bytes - 1);
      }
    };
    if (pf.k_stride == pf.k_bytes) {
      // Packed rows: each line of the span once, K kAhead rows ahead of the
      // scores (int8 decode from DRAM was no slower than with each K row
      // requested just before its use; the shared host's noise hid any gain).
      constexpr std::int64_t kAhead = 8;
      const std::int64_t k0 = j0 == 0 ? 0 : j0 + kAhead;
      std::int64_t k1 = end + kAhead;
      k1 = k1 < pf.rows ? k1 : pf.rows;
      const std::uint8_t* const k_end = pf.k + k1 * pf.k_stride;
      for (const std::uint8_t* p = line(pf.k + k0 * pf.k_stride); p < k_end; p += 64)
        RequestLine(p);
    } else {
      each_row(pf.k, pf.k_stride, pf.k_bytes);
    }
    if (pf.v == nullptr) return;
    if (pf.v_stride == pf.v_bytes) {
      const std::uint8_t* const v_end = pf.v + end * pf.v_stride;
      for (const std::uint8_t* p = line(pf.v + j0 * pf.v_stride); p < v_end; p += 64)
        RequestLine(p);
    } else {
      each_row(pf.v, pf.v_stride, pf.v_bytes);
    }
  }

  // Requests the rows of `rows` one at a time, evenly over `steps` (>= 1) calls
  // of Step: the next block's V during this block's value sums, which visit
  // each key pair once per chunk of values. rows.rows 0: does nothing.
  struct Trickle {
    const Prefetch& rows;
    std::int64_t steps;
    std::int64_t row = 0;
    std::int64_t credit = 0;
    // One Step per key pair of a block of kb keys on each of `walks` walks.
    static Trickle OverWalks(const Prefetch& rows, std::int64_t walks, std::int64_t kb) {
      const std::int64_t steps = walks * ((kb + 1) / 2);
      return Trickle{.rows = rows, .steps = steps > 0 ? steps : 1};
    }
    __attribute__((always_inline)) void Step() {
      credit += rows.rows;
      while (credit >= steps) {
        credit -= steps;
        PrefetchRows(rows, row++, 1);
      }
    }
  };

  template <int R, int K>
  static void ScoreRows(const float* q, std::int64_t q_stride, const std::uint8_t* k,
                        std::int64_t k_stride, std::int64_t kb, std::int64_t d, float* s,
                        std::int64_t s_stride, const Prefetch& pf) {
    ForEachKeyTile<K>(
        kb, [&](std::int64_t j, std::int64_t keys) { PrefetchRows(pf, j, keys); },
        [&]<int Kt>(std::int64_t j) {
          Dots<R, Kt>(q, q_stride, k + j * k_stride, k_stride, d, s + j, s_stride);
        });
  }

  // ---- Integer decode ----
  // Scores: each scaled query row is rounded to int16 with its own scale
  // (max |q| -> QueryRange), so s_j = (sum_c q16_c q8_jc) qscale scale_j for
  // int8 K, s_j = qscale sum_g scale_jg (q16_g . q4_jg) for int4 K (each
  // group's int32 sum converted and scaled in the lanes, the float kernel's way).
  // Values: each row's weights of a block are rounded the same way (max |w| ->
  // WeightRange): w_j = p_j scale_j for int8 V, one w_jg = p_j scale_jg per
  // group for int4 V; acc = acc alpha + wscale sum_j w16_j q_j, two keys per
  // multiply-add. Either rounding moves a term by at most 2^-16 of the row's
  // largest one (docs/quantized_kv.md has the error measured against f64).
  // Queries or weights that are not all finite take the float steps, so NaN and
  // Inf propagate exactly as there. The ranges keep every int32 sum exact:
  // |q8|, |v8| <= 128, |q4| <= 8.
  using Dot = I16Dot<Arch>;
  using I = I32Batch<Arch>;
  static constexpr std::int64_t kL = Dot::kLanes;  // int16 values per register
  // int4 values of one WidenI4 (kL bytes): its even values, then its odd ones,
  // each kL int16 lanes. Within one scale group, or two (AVX-512), see LowLanes.
  static constexpr std::int64_t kRun = 2 * kL;
  static_assert(kRun <= 2 * kGroup && (kRun <= kGroup || kRun == 2 * kGroup));
  // Keys per register tile of 4 rows: 4 x 2 accumulators, 2 K vectors and a q
  // vector fit AVX2's 16 registers (4 x 3 spilled accumulators to the stack);
  // AVX-512's 32 hold 4 x 4, whose 16 sums fill one transpose-add.
  static constexpr int kIntScoreKeys = kN == 16 ? 4 : 2;
  // Registers of V values (kL each) per pass of the value sums with 4 rows,
  // each with a low and a high pair sum: AVX-512 holds 4 x 2 x 2, so each weight
  // pair broadcast serves two registers of values (int8), and each int4 run is
  // widened once for both its halves instead of once per half.
  static constexpr int kIntValueChunks = kN == 16 ? 2 : 1;
  // int4 K on AVX-512 with d a multiple of kGroupBlock: the scores take 128
  // values of four groups at a time, every int32 lane within one group
  // (I16Dot::WidenI4Groups), so each key and row pay one conversion and one FMA
  // per 128 values instead of one per run of 64, and a 4 x 4 tile one per key
  // (docs/attention_tuning.md, "int4 scores by groups of lanes" and "int4 group
  // sums folded in int32, nibbles by shifts, and what the integer steps wait
  // on").
  static constexpr std::int64_t kGroupBlock = 4 * kGroup;
  static constexpr bool GroupLanes(std::int64_t d) {
    return kK == DType::kI4 && kN == 16 && kGroup == 32 && d % kGroupBlock == 0;
  }
  static constexpr std::int64_t kKMag = kK == DType::kI8 ? 128 : 8;  // max |stored value|
  static constexpr std::int64_t kVMag = kV == DType::kI8 ? 128 : 8;

  static float QueryRange(std::int64_t d) {
    const std::int64_t fit = 2147483647 / (kKMag * (d > 0 ? d : 1));
    return static_cast<float>(fit < 32767 ? fit : 32767);
  }
  static float WeightRange(std::int64_t kb_pad) {
    const std::int64_t fit = 2147483647 / (kVMag * kb_pad);
    return static_cast<float>(fit < 32767 ? fit : 32767);
  }

  // What the decode path of a tile uses; scores / values false: the float step.
  struct IntDecode {
    bool scores = false;
    bool values = false;
    const std::int16_t* q = nullptr;  // row r at q + r * q_stride
    std::int64_t q_stride = 0;
    float* qscale = nullptr;  // [rows_total]
    float* wscale = nullptr;  // [rows_total]: max |w| of the block, then its scale
    // int4 V: weight (r, g, j) at weights + r * w_row_stride + g * w_group_stride + j.
    std::int16_t* weights = nullptr;
    std::int64_t w_row_stride = 0;
    std::int64_t w_group_stride = 0;
    // The next block's K and V rows (as K rows: v is nullptr), requested during
    // this block's scores and value sums, so that the next block finds them in
    // cache; k nullptr: no next block.
    Prefetch next_k;
    Prefetch next_v;
  };

  // True in the first kN / 2 lanes: the lanes of a run's first scale group when
  // it covers two (AVX-512; Madd and InterleaveLo / Hi keep them there).
  template <class T>
  static xsimd::batch_bool<T, Arch> LowLanes() {
    alignas(64) static constexpr T kIota[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                8, 9, 10, 11, 12, 13, 14, 15};
    return xsimd::batch<T, Arch>::load_aligned(kIota) < xsimd::batch<T, Arch>(T(kN / 2));
  }

  static void StoreI16(std::int16_t value, float* base, std::int64_t index) {
    __builtin_memcpy(reinterpret_cast<unsigned char*>(base) + 2 * index, &value, sizeof value);
  }
  static std::int32_t LoadI16(const std::int16_t* p) {
    std::int16_t value;
    __builtin_memcpy(&value, p, sizeof value);
    return value;
  }

  // Rounds each scaled query row in place to int16 (its first 2 d bytes; a value
  // is read before any write reaches it), qscale[r] its scale; for int4 K from
  // span order (ScaleQuery) to run order: each run of kRun values as its kL even
  // values, then its kL odd ones; or, GroupLanes, to block order: each block of
  // kGroupBlock values as WidenI4Groups' four registers. False, qs
  // as it was, when a value is not finite.
  static bool QuantizeQueries(std::int64_t rows_total, std::int64_t d, std::int64_t qd, float* qs,
                              float* qscale) {
    for (std::int64_t r = 0; r < rows_total; ++r) {
      const float* row = qs + r * qd;
      float amax = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) {
        const float a = __builtin_fabsf(row[c]);
        if (!(a <= __FLT_MAX__)) return false;
        amax = a > amax ? a : amax;
      }
      qscale[r] = amax;
    }
    const float range = QueryRange(d);
    for (std::int64_t r = 0; r < rows_total; ++r) {
      float* row = qs + r * qd;
      const float inv = qscale[r] > 0.0f ? range / qscale[r] : 0.0f;
      const auto round = [&](float value) {
        const float x = __builtin_rintf(value * inv);
        return static_cast<std::int16_t>(x > range ? range : x < -range ? -range : x);
      };
      // Where value v of the row sits in span order.
      const auto span_at = [](std::int64_t v) {
        const std::int64_t in_span = v % (2 * kN);
        return v - in_span + (in_span % 2 == 0 ? 0 : kN) + in_span / 2;
      };
      if constexpr (kK == DType::kI8) {
        for (std::int64_t c = 0; c < d; ++c) StoreI16(round(row[c]), row, c);
      } else if (GroupLanes(d)) {
        // Block c's int16 land on floats [c / 2, c / 2 + kGroupBlock / 2): read
        // already (earlier blocks) or copied (block 0).
        for (std::int64_t c = 0; c < d; c += kGroupBlock) {
          alignas(64) float block[static_cast<std::size_t>(kGroupBlock)];
          __builtin_memcpy(block, row + c, sizeof block);
          for (std::int64_t i = 0; i < kGroupBlock; ++i) {
            const std::int64_t nibble = i / kL;  // WidenI4Groups' register
            const std::int64_t v = 4 * (i % kL) + nibble;
            StoreI16(round(block[span_at(v)]), row, c + i);
          }
        }
      } else {
        // Run c's int16 land on floats [c / 2, c / 2 + kRun / 2): read already
        // (earlier runs) or copied (run 0).
        for (std::int64_t c = 0; c < d; c += kRun) {
          alignas(64) float run[static_cast<std::size_t>(kRun)];
          __builtin_memcpy(run, row + c, sizeof run);
          for (std::int64_t i = 0; i < kRun; ++i) {
            StoreI16(round(run[span_at(i)]), row, c + (i % 2 == 0 ? 0 : kL) + i / 2);
          }
        }
      }
      qscale[r] /= range;
    }
    return true;
  }

  // out[r * out_stride + j] = q16_r . q8_j for R int16 query rows and K int8
  // keys, unscaled (ScaleScores applies the scales to the whole block).
  template <int R, int K>
  __attribute__((always_inline)) static void IntDots(const std::int16_t* q, std::int64_t q_stride,
                                                     const std::uint8_t* k, std::int64_t k_stride,
                                                     std::int64_t d, float* out,
                                                     std::int64_t out_stride) {
    constexpr int kRK = R * K;
    I acc[static_cast<std::size_t>(kRK)];
#pragma GCC unroll 32
    for (int a = 0; a < kRK; ++a) acc[a] = I(0);
    const std::int64_t d_vec = d - d % kL;
    for (std::int64_t c = 0; c < d_vec; c += kL) {
      I kv[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) kv[j] = Dot::WidenI8(k + j * k_stride + c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        // q loaded once for the K keys (Zen 3 loads two 256-bit operands a
        // cycle); every sum pinned after its update, or GCC issues all R x K
        // multiply-adds first and spills accumulators to the stack.
        typename I::register_type qv = Dot::Load(q + r * q_stride + c);
        PinToVectorRegister(qv);
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) {
          typename I::register_type sum = Dot::MaddAdd(acc[r * K + j], kv[j], I(qv));
          PinToVectorRegister(sum);
          acc[r * K + j] = sum;
        }
      }
    }
    if constexpr (kN == 16 && R == 4 && K == 4) {
      if (d_vec == d) {
        // The 16 sums added in int32 (exact, see QueryRange), one conversion.
        StoreQuarters<Arch>(xsimd::batch_cast<float>(TransposeAddI32<Arch>(acc)), out, out_stride,
                            nullptr);
        return;
      }
    }
    B wide[static_cast<std::size_t>(kRK)];
#pragma GCC unroll 32
    for (int a = 0; a < kRK; ++a) wide[a] = xsimd::batch_cast<float>(acc[a]);
    if (d_vec == d) {
      Float::template StoreSums<R, K>(wide, out, out_stride, nullptr);
      return;
    }
    alignas(64) float sums[static_cast<std::size_t>((kRK + kN - 1) / kN * kN)];
    Float::template SumLanes<kRK>(wide, sums);
    for (std::int64_t c = d_vec; c < d; ++c) {
      for (int j = 0; j < K; ++j) {
        const auto kc = static_cast<float>(static_cast<std::int8_t>(k[j * k_stride + c]));
        for (int r = 0; r < R; ++r) {
          sums[r * K + j] += static_cast<float>(LoadI16(q + r * q_stride + c)) * kc;
        }
      }
    }
    for (int r = 0; r < R; ++r) __builtin_memcpy(out + r * out_stride, sums + r * K, K * 4);
  }

  // The scales of the groups of the run of int4 values at c, lane by lane as
  // Madd leaves its sums (int32 lane i: values c + 4i .. c + 4i + 3).
  __attribute__((always_inline)) static B RunScales(const std::uint8_t* scales, std::int64_t c) {
    const B first(Scale(scales + c / kGroup * 4));
    if constexpr (kRun <= kGroup) {
      return first;
    } else {
      return xsimd::select(LowLanes<float>(), first, B(Scale(scales + (c / kGroup + 1) * 4)));
    }
  }

  // out[r * out_stride + j] = qscale_r sum_g scale_jg (q16_rg . q4_jg) for R
  // int16 query rows (run order) and K int4 keys; d % kRun == 0.
  template <int R, int K>
  __attribute__((always_inline)) static void IntDotsI4(const std::int16_t* q, std::int64_t q_stride,
                                                       const float* qscale, const std::uint8_t* k,
                                                       std::int64_t k_stride, std::int64_t d,
                                                       float* out, std::int64_t out_stride) {
    constexpr int kRK = R * K;
    B acc[static_cast<std::size_t>(kRK)];
#pragma GCC unroll 32
    for (int a = 0; a < kRK; ++a) acc[a] = B(0.0f);
    for (std::int64_t c = 0; c < d; c += kRun) {
      I even[static_cast<std::size_t>(K)];
      I odd[static_cast<std::size_t>(K)];
      B scale[static_cast<std::size_t>(K)];
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) {
        const std::uint8_t* row = k + j * k_stride;
        Dot::WidenI4(row + c / 2, even[j], odd[j]);
        scale[j] = RunScales(row + d / 2, c);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const I qe = Dot::Load(q + r * q_stride + c);
        const I qo = Dot::Load(q + r * q_stride + c + kL);
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) {
          const I sum = Dot::MaddAdd(Dot::Madd(even[j], qe), odd[j], qo);
          acc[r * K + j] = xsimd::fma(xsimd::batch_cast<float>(sum), scale[j], acc[r * K + j]);
        }
      }
    }
    Float::template StoreSums<R, K>(acc, out, out_stride, qscale);
  }

  // sums[r] = the int32 lanes of q16_r . q4 over one block of kGroupBlock
  // values of a key (k_block) and of R query rows in block order (q rows
  // q_stride apart): lanes 4 g .. 4 g + 3 hold group g's parts.
  template <int R>
  __attribute__((always_inline)) static void GroupBlockSums(const std::uint8_t* k_block,
                                                            const std::int16_t* q,
                                                            std::int64_t q_stride, I* sums) {
    I nibbles[4];
    Dot::WidenI4Groups(k_block, nibbles);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const std::int16_t* qr = q + r * q_stride;
      I sum = Dot::Madd(nibbles[0], Dot::Load(qr));
      sum = Dot::MaddAdd(sum, nibbles[1], Dot::Load(qr + kL));
      sum = Dot::MaddAdd(sum, nibbles[2], Dot::Load(qr + 2 * kL));
      sums[r] = Dot::MaddAdd(sum, nibbles[3], Dot::Load(qr + 3 * kL));
    }
  }

  // IntDotsI4 for GroupLanes: q rows in block order. Key by key, so that only
  // one key's four K registers are live beside the R x K sums.
  template <int R, int K>
  __attribute__((always_inline)) static void IntDotsI4Blocks(
      const std::int16_t* q, std::int64_t q_stride, const float* qscale, const std::uint8_t* k,
      std::int64_t k_stride, std::int64_t d, float* out, std::int64_t out_stride) {
    if constexpr (R == 4 && K == 4) {
      // Each key's four row sums are first folded within the groups' 128-bit
      // lanes, in int32, so that one conversion and one FMA by the group scales
      // serve the four rows, and the transpose-add is left with four registers.
      B parts[4] = {B(0.0f), B(0.0f), B(0.0f), B(0.0f)};
      for (std::int64_t c = 0; c < d; c += kGroupBlock) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const std::uint8_t* row = k + j * k_stride;
          I sums[4];
          GroupBlockSums<4>(row + c / 2, q + c, q_stride, sums);
          parts[j] = xsimd::fma(SumLaneQuadsI32<Arch>(sums),
                                Dot::GroupScales(row + d / 2 + c / kGroup * 4), parts[j]);
        }
      }
      StoreQuarters<Arch>(SumQuarterParts<Arch>(parts), out, out_stride, qscale);
      return;
    }
    constexpr int kRK = R * K;
    B acc[static_cast<std::size_t>(kRK)];
#pragma GCC unroll 32
    for (int a = 0; a < kRK; ++a) acc[a] = B(0.0f);
    for (std::int64_t c = 0; c < d; c += kGroupBlock) {
#pragma GCC unroll 16
      for (int j = 0; j < K; ++j) {
        const std::uint8_t* row = k + j * k_stride;
        I sums[static_cast<std::size_t>(R)];
        GroupBlockSums<R>(row + c / 2, q + c, q_stride, sums);
        const B scale = Dot::GroupScales(row + d / 2 + c / kGroup * 4);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          acc[r * K + j] = xsimd::fma(xsimd::batch_cast<float>(sums[r]), scale, acc[r * K + j]);
        }
      }
    }
    Float::template StoreSums<R, K>(acc, out, out_stride, qscale);
  }

  // The scales of rows j .. j + kN - 1 (row i's at base + i * stride), 0 for rows
  // past kb - 1.
  static B ScalesOf(const std::uint8_t* base, std::int64_t stride, std::int64_t j,
                    std::int64_t kb) {
    if (j + kN <= kb) return StridedF32<Arch>(base + j * stride, stride);
    alignas(64) float sc[static_cast<std::size_t>(kN)];
    for (std::int64_t i = 0; i < kN; ++i)
      sc[i] = j + i < kb ? Scale(base + (j + i) * stride) : 0.0f;
    return B::load_aligned(sc);
  }

  // ScalesOf for up to four groups of int4 V scales: out[i] = the scales of
  // group i of rows j .. j + kN - 1 (base at group 0's), for i < min(groups, 4),
  // which it returns.
  static std::int64_t ScalesOfGroups(const std::uint8_t* base, std::int64_t stride, std::int64_t j,
                                     std::int64_t kb, std::int64_t groups, B* out) {
    if (groups >= 4 && j + kN <= kb) {
      StridedF32Quads<Arch>(base + j * stride, stride, out);
      return 4;
    }
    const std::int64_t n = groups < 4 ? groups : 4;
    for (std::int64_t i = 0; i < n; ++i) out[i] = ScalesOf(base + 4 * i, stride, j, kb);
    return n;
  }

  // s[r][j] *= qscale[r] scale_j over the block: the scales IntDots leaves out.
  static void ScaleScores(const AttendTile& t, std::int64_t rows_total, const float* qscale,
                          const std::uint8_t* k, std::int64_t k_stride, std::int64_t kb, float* s) {
    for (std::int64_t j = 0; j < kb; j += kN) {
      const B scale = ScalesOf(k + t.d, k_stride, j, kb);
      for (std::int64_t r = 0; r < rows_total; ++r) {
        float* at = s + r * t.block + j;
        (B::load_unaligned(at) * (scale * B(qscale[r]))).store_unaligned(at);
      }
    }
  }

  // int8 K: the scores without their scales (ScaleScores); int4 K: with them.
  template <int R, int K>
  static void IntScoreRows(const std::int16_t* q, std::int64_t q_stride, const float* qscale,
                           const std::uint8_t* k, std::int64_t k_stride, std::int64_t kb,
                           std::int64_t d, float* s, std::int64_t s_stride, const Prefetch& pf,
                           const Prefetch& next_k) {
    ForEachKeyTile<K>(
        kb,
        [&](std::int64_t j, std::int64_t keys) {
          PrefetchRows(pf, j, keys);
          PrefetchRows(next_k, j, keys);
        },
        [&]<int Kt>(std::int64_t j) {
          if constexpr (kK == DType::kI8) {
            IntDots<R, Kt>(q, q_stride, k + j * k_stride, k_stride, d, s + j, s_stride);
          } else {
            if constexpr (kN == 16) {
              if (GroupLanes(d)) {
                IntDotsI4Blocks<R, Kt>(q, q_stride, qscale, k + j * k_stride, k_stride, d, s + j,
                                       s_stride);
                return;
              }
            }
            IntDotsI4<R, Kt>(q, q_stride, qscale, k + j * k_stride, k_stride, d, s + j, s_stride);
          }
        });
  }

  // Rounds each row's folded weights (FoldVScales) in place to int16, over the
  // padded block (padding weights are 0); wscale[r]: max |w| in, scale out.
  static void QuantizeWeights(const AttendTile& t, std::int64_t rows_total, float* s,
                              std::int64_t kb_pad, float* wscale) {
    const float range = WeightRange(kb_pad);
    for (std::int64_t r = 0; r < rows_total; ++r) {
      float* row = s + r * t.block;
      const float inv = wscale[r] > 0.0f ? range / wscale[r] : 0.0f;
      wscale[r] /= range;
      // 2 kN floats in, 2 kN int16 out at half the offset: all of a step's
      // floats are loaded before its store, which reaches only floats already read.
      for (std::int64_t j = 0; j < kb_pad; j += 2 * kN) {
        const I lo = QuantizeBatch<Arch>(B::load_unaligned(row + j), inv, range);
        const I hi = j + kN < kb_pad
                         ? QuantizeBatch<Arch>(B::load_unaligned(row + j + kN), inv, range)
                         : I(0);
        Dot::Narrow(lo, hi).store_unaligned(
            reinterpret_cast<std::int32_t*>(reinterpret_cast<unsigned char*>(row) + 2 * j));
      }
    }
  }

  // Calls step(va, vb, j) for the key pairs (j, j + 1) of a block, va and vb
  // rows j and j + 1 of v; a last, odd key pairs with itself (vb = va), its
  // partner's weight being 0.
  template <class Step>
  __attribute__((always_inline)) static void ForEachKeyPair(const std::uint8_t* v,
                                                            std::int64_t v_stride, std::int64_t kb,
                                                            Trickle& trickle, const Step& step) {
    std::int64_t j = 0;
#pragma GCC unroll 2
    for (; j + 1 < kb; j += 2) {
      trickle.Step();
      const std::uint8_t* va = v + j * v_stride;
      step(va, va + v_stride, j);
    }
    if (j < kb) {
      trickle.Step();
      step(v + j * v_stride, v + j * v_stride, j);
    }
  }

  // out = out alpha + sums scale for the pair sums of InterleaveLo (lo) and
  // InterleaveHi (hi): their first half at out, their second `gap` floats on.
  __attribute__((always_inline)) static void AddScaledSums(I lo, I hi, float alpha, float scale,
                                                           float* out, std::int64_t gap) {
    Dot::InOrder(lo, hi);
    const B a(alpha);
    const B sc(scale);
    xsimd::fma(xsimd::batch_cast<float>(lo), sc, B::load_unaligned(out) * a).store_unaligned(out);
    xsimd::fma(xsimd::batch_cast<float>(hi), sc, B::load_unaligned(out + gap) * a)
        .store_unaligned(out + gap);
  }

  // acc_r = acc_r alpha_r + wscale_r sum_j w16[r][j] v_j, VC registers of Dv
  // (kL values each) at a time: V rows j and j + 1 widened, interleaved, and
  // multiplied with the row's weight pair in one pmaddwd.
  template <int R, int VC>
  __attribute__((always_inline)) static std::int64_t IntAccumulateChunks(
      const std::int16_t* w, std::int64_t w_stride, const float* alpha, const float* wscale,
      const std::uint8_t* v, std::int64_t v_stride, std::int64_t kb, std::int64_t c,
      std::int64_t dv, float* acc, std::int64_t acc_stride, Trickle& trickle) {
    for (; c + VC * kL <= dv; c += VC * kL) {
      I lo[static_cast<std::size_t>(R * VC)];
      I hi[static_cast<std::size_t>(R * VC)];
#pragma GCC unroll 16
      for (int a = 0; a < R * VC; ++a) lo[a] = hi[a] = I(0);
      const auto pair_step = [&](const std::uint8_t* va, const std::uint8_t* vb, std::int64_t j)
          __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int x = 0; x < VC; ++x) {
          const I a = Dot::WidenI8(va + x * kL);
          const I b = Dot::WidenI8(vb + x * kL);
          const I il = Dot::InterleaveLo(a, b);
          const I ih = Dot::InterleaveHi(a, b);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            const I pair = Dot::BroadcastPair(w + r * w_stride + j);
            Dot::MaddAddInPlace(lo[r * VC + x], il, pair);
            Dot::MaddAddInPlace(hi[r * VC + x], ih, pair);
          }
        }
      };
      ForEachKeyPair(v + c, v_stride, kb, trickle, pair_step);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int x = 0; x < VC; ++x) {
          AddScaledSums(lo[r * VC + x], hi[r * VC + x], alpha[r], wscale[r],
                        acc + r * acc_stride + c + x * kL, kN);
        }
      }
    }
    return c;
  }

  template <int R, int VC>
  static void IntAccumulateRows(const std::int16_t* w, std::int64_t w_stride, const float* alpha,
                                const float* wscale, const std::uint8_t* v, std::int64_t v_stride,
                                std::int64_t kb, std::int64_t dv, float* acc,
                                std::int64_t acc_stride, const Prefetch& next_v) {
    // One walk over the key pairs per chunk of values.
    Trickle trickle = Trickle::OverWalks(next_v, dv / (VC * kL) + dv % (VC * kL) / kL, kb);
    std::int64_t c = IntAccumulateChunks<R, VC>(w, w_stride, alpha, wscale, v, v_stride, kb, 0, dv,
                                                acc, acc_stride, trickle);
    c = IntAccumulateChunks<R, 1>(w, w_stride, alpha, wscale, v, v_stride, kb, c, dv, acc,
                                  acc_stride, trickle);
    for (; c < dv; ++c) {
      for (int r = 0; r < R; ++r) {
        std::int32_t sum = 0;
        for (std::int64_t j = 0; j < kb; ++j) {
          sum += LoadI16(w + r * w_stride + j) * static_cast<std::int8_t>(v[j * v_stride + c]);
        }
        float& out = acc[r * acc_stride + c];
        out = out * alpha[r] + static_cast<float>(sum) * wscale[r];
      }
    }
  }

  static void IntAccumulate(const AttendTile& t, std::int64_t rows_total, float* s,
                            const float* alpha, float* wscale, const std::uint8_t* v,
                            std::int64_t v_stride, std::int64_t kb, const Prefetch& next_v) {
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    QuantizeWeights(t, rows_total, s, kb_pad, wscale);
    const auto* w = reinterpret_cast<const std::int16_t*>(s);
    const std::int64_t w_stride = 2 * t.block;
    const Prefetch none;
    ForEachRowTile<0, 1, kIntValueChunks, 1>(rows_total, 0, [&]<int R, int VC>(std::int64_t r) {
      IntAccumulateRows<R, VC>(w + r * w_stride, w_stride, alpha + r, wscale + r, v, v_stride, kb,
                               t.dv, t.acc + r * t.acc_stride, t.acc_stride,
                               r == 0 ? next_v : none);
    });
  }

  // int8 V: p[r][j] *= scale_j, except hidden keys (p = -0.0), which must stay
  // marked so that not even a NaN scale reaches the row. wmax[r] = the row's
  // largest |p scale|; returns whether every product is finite. The padding keys
  // past kb (p = 0 or -0.0) get scale 0.
  static bool FoldVScales(const AttendTile& t, std::int64_t rows_total, float* s,
                          const std::uint8_t* v, std::int64_t v_stride, std::int64_t kb,
                          float* wmax) {
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    B mx[static_cast<std::size_t>(kDequantTileRows)];  // Block: rows_total < kDequantTileRows
    for (std::int64_t r = 0; r < rows_total; ++r) mx[r] = B(0.0f);
    auto finite = B(0.0f) == B(0.0f);
    const B big(__FLT_MAX__);
    for (std::int64_t j = 0; j < kb_pad; j += kN) {
      const B scale = ScalesOf(v + t.dv, v_stride, j, kb);
      for (std::int64_t r = 0; r < rows_total; ++r) {
        float* at = s + r * t.block + j;
        const B p = B::load_unaligned(at);
        const auto hidden = xsimd::bool_cast(BitCast<std::int32_t>(p) == I(INT32_MIN));
        const B folded = xsimd::select(hidden, p, p * scale);
        folded.store_unaligned(at);
        const B mag = AbsBits<Arch>(folded);
        finite = finite & (mag <= big);  // false for NaN too
        mx[r] = xsimd::select(mag > mx[r], mag, mx[r]);
      }
    }
    for (std::int64_t r = 0; r < rows_total; ++r) wmax[r] = ReduceMax<Arch>(mx[r]);
    return xsimd::all(finite);
  }

  // int4 V: w[r][g][j] = p[r][j] scale_jg over the block (id.weights), rounded
  // to int16 with the row's scale (its largest |w| -> WeightRange, wscale[r]);
  // hidden keys (p = -0.0) and the padding past kb get 0, so that not even a NaN
  // scale reaches the row. False when a visible key's p or scales are not
  // finite (s is not changed: the float step then reads it).
  static bool QuantizeGroupWeights(const AttendTile& t, std::int64_t rows_total, const float* s,
                                   const std::uint8_t* v, std::int64_t v_stride, std::int64_t kb,
                                   const IntDecode& id) {
    const std::int64_t groups = t.dv / kGroup;
    const std::int64_t kb_pad = (kb + kN - 1) / kN * kN;
    const std::uint8_t* const scales = v + t.dv / 2;
    const B big(__FLT_MAX__);
    const auto visible = [](const B& p) {
      return xsimd::bool_cast(BitCast<std::int32_t>(p) != I(INT32_MIN));
    };
    // max |w| = max_j |p_j| max_g |scale_jg|: one product per key and row.
    B mx[static_cast<std::size_t>(kDequantTileRows)];  // Block: rows_total < kDequantTileRows
    for (std::int64_t r = 0; r < rows_total; ++r) mx[r] = B(0.0f);
    auto finite = B(0.0f) == B(0.0f);
    for (std::int64_t j = 0; j < kb_pad; j += kN) {
      B top(0.0f);
      auto ok = B(0.0f) == B(0.0f);
      for (std::int64_t g = 0; g < groups; g += 4) {
        B sc[4];
        const std::int64_t n = ScalesOfGroups(scales + g * 4, v_stride, j, kb, groups - g, sc);
        for (std::int64_t i = 0; i < n; ++i) {
          const B mag = AbsBits<Arch>(sc[i]);
          ok = ok & (mag <= big);  // false for NaN too
          top = xsimd::select(mag > top, mag, top);
        }
      }
      for (std::int64_t r = 0; r < rows_total; ++r) {
        const B p = B::load_unaligned(s + r * t.block + j);
        const B mag = AbsBits<Arch>(p);
        finite = finite & (~visible(p) | (ok & (mag <= big)));
        const B w = mag * top;
        mx[r] = xsimd::select(w > mx[r], w, mx[r]);
      }
    }
    if (!xsimd::all(finite)) return false;
    const float range = WeightRange(kb_pad);
    float inv[static_cast<std::size_t>(kDequantTileRows)];
    for (std::int64_t r = 0; r < rows_total; ++r) {
      const float wmax = ReduceMax<Arch>(mx[r]);
      inv[r] = wmax > 0.0f ? range / wmax : 0.0f;
      id.wscale[r] = wmax / range;
    }
    // 2 kN keys per store (w_group_stride, DecodeWeightKeys, leaves room for
    // them). |p inv scale| <= range up to rounding, so no clamp; a scale that is
    // not finite belongs to a hidden key and becomes 0.
    const auto finite_or_zero = [&](const B& x) {
      return xsimd::select(AbsBits<Arch>(x) <= big, x, B(0.0f));
    };
    for (std::int64_t g0 = 0; g0 < groups; g0 += 4) {
      for (std::int64_t j = 0; j < kb_pad; j += 2 * kN) {
        const bool two = j + kN < kb_pad;
        B first[4];
        B second[4] = {B(0.0f), B(0.0f), B(0.0f), B(0.0f)};
        const std::int64_t n = ScalesOfGroups(scales + g0 * 4, v_stride, j, kb, groups - g0, first);
        if (two) ScalesOfGroups(scales + g0 * 4, v_stride, j + kN, kb, groups - g0, second);
        for (std::int64_t i = 0; i < n; ++i) {
          const B sc_first = finite_or_zero(first[i]);
          const B sc_second = finite_or_zero(second[i]);
          for (std::int64_t r = 0; r < rows_total; ++r) {
            const float* p = s + r * t.block + j;
            const B pi(inv[r]);
            const I lo = xsimd::nearbyint_as_int(B::load_unaligned(p) * pi * sc_first);
            const I hi =
                two ? xsimd::nearbyint_as_int(B::load_unaligned(p + kN) * pi * sc_second) : I(0);
            Dot::Narrow(lo, hi).store_unaligned(reinterpret_cast<std::int32_t*>(
                id.weights + r * id.w_row_stride + (g0 + i) * id.w_group_stride + j));
          }
        }
      }
    }
    return true;
  }

  // The weight pairs (w_jg, w_j+1,g) of a row for the run of int4 values at c,
  // lane by lane as InterleaveLo / Hi leave the pairs of V values.
  __attribute__((always_inline)) static I WeightPairs(const std::int16_t* w_row,
                                                      std::int64_t group_stride, std::int64_t c,
                                                      std::int64_t j) {
    const std::int16_t* w = w_row + c / kGroup * group_stride + j;
    if constexpr (kRun <= kGroup) {
      return Dot::BroadcastPair(w);
    } else {
      return xsimd::select(LowLanes<std::int32_t>(), Dot::BroadcastPair(w),
                           Dot::BroadcastPair(w + group_stride));
    }
  }

  // int4 V: acc_r = acc_r alpha_r + wscale_r sum_j w16[r][g][j] v_j, run by run,
  // H halves of a run (its even values, its odd ones) per pass from kFirst: V
  // rows j and j + 1 widened, interleaved, and multiplied with the row's weight
  // pair of the group in one pmaddwd. The sums land in span order (a run is two
  // spans: even values 0 .. 2 kN - 2 first, then the odd ones, then the next span).
  template <int R, int H, int kFirst>
  __attribute__((always_inline)) static void IntAccumulateI4Pass(
      const IntDecode& id, const float* alpha, const float* wscale, const std::uint8_t* v,
      std::int64_t v_stride, std::int64_t kb, std::int64_t c, float* acc, std::int64_t acc_stride,
      Trickle& trickle) {
    I lo[static_cast<std::size_t>(R * H)];
    I hi[static_cast<std::size_t>(R * H)];
#pragma GCC unroll 16
    for (int a = 0; a < R * H; ++a) lo[a] = hi[a] = I(0);
    const auto pair_step = [&](const std::uint8_t* va, const std::uint8_t* vb, std::int64_t j)
        __attribute__((always_inline)) {
      I a[2];
      I b[2];
      Dot::WidenI4(va, a[0], a[1]);
      Dot::WidenI4(vb, b[0], b[1]);
#pragma GCC unroll 4
      for (int x = 0; x < H; ++x) {
        const I il = Dot::InterleaveLo(a[kFirst + x], b[kFirst + x]);
        const I ih = Dot::InterleaveHi(a[kFirst + x], b[kFirst + x]);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const I pair = WeightPairs(id.weights + r * id.w_row_stride, id.w_group_stride, c, j);
          Dot::MaddAddInPlace(lo[r * H + x], il, pair);
          Dot::MaddAddInPlace(hi[r * H + x], ih, pair);
        }
      }
    };
    ForEachKeyPair(v + c / 2, v_stride, kb, trickle, pair_step);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int x = 0; x < H; ++x) {
        AddScaledSums(lo[r * H + x], hi[r * H + x], alpha[r], wscale[r],
                      acc + r * acc_stride + c + (kFirst + x) * kN, 2 * kN);
      }
    }
  }

  static void IntAccumulateI4(const AttendTile& t, std::int64_t rows_total, const float* alpha,
                              const std::uint8_t* v, std::int64_t v_stride, std::int64_t kb,
                              const IntDecode& id) {
    const Prefetch none;
    ForEachRowTile<0, 1, kIntValueChunks, 1>(rows_total, 0, [&]<int R, int C>(std::int64_t r) {
      IntDecode rows = id;
      rows.weights = id.weights + r * id.w_row_stride;
      float* const acc = t.acc + r * t.acc_stride;
      // One walk over the key pairs per run, two when a run takes two passes.
      Trickle trickle =
          Trickle::OverWalks(r == 0 ? id.next_v : none, t.dv / kRun * (C >= 2 ? 1 : 2), kb);
      for (std::int64_t c = 0; c < t.dv; c += kRun) {
        if constexpr (C >= 2) {
          IntAccumulateI4Pass<R, 2, 0>(rows, alpha + r, id.wscale + r, v, v_stride, kb, c, acc,
                                       t.acc_stride, trickle);
        } else {
          IntAccumulateI4Pass<R, 1, 0>(rows, alpha + r, id.wscale + r, v, v_stride, kb, c, acc,
                                       t.acc_stride, trickle);
          IntAccumulateI4Pass<R, 1, 1>(rows, alpha + r, id.wscale + r, v, v_stride, kb, c, acc,
                                       t.acc_stride, trickle);
        }
      }
    });
  }

  // acc_r = acc_r * alpha_r + sum_j p[r][j] v_j, VC vectors of Dv at a time
  // (int8: VC batches; int4: VC spans of two batches, in span order).
  template <int R, int VC, bool kSkipHidden>
  __attribute__((always_inline)) static std::int64_t AccumulateChunks(
      const float* p, std::int64_t p_stride, const float* alpha, const std::uint8_t* v,
      std::int64_t v_stride, std::int64_t kb, std::int64_t c, std::int64_t dv, float* acc,
      std::int64_t acc_stride) {
    constexpr int kVecs = kV == DType::kI8 ? VC : 2 * VC;  // batches per chunk
    constexpr std::int64_t kChunk = kVecs * kN;            // values per chunk
    for (; c + kChunk <= dv; c += kChunk) {
      B a[static_cast<std::size_t>(R * kVecs)];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const B scale(alpha[r]);
#pragma GCC unroll 16
        for (int x = 0; x < kVecs; ++x) {
          a[r * kVecs + x] = B::load_unaligned(acc + r * acc_stride + c + x * kN) * scale;
        }
      }
      for (std::int64_t j = 0; j < kb; ++j) {
        const std::uint8_t* vj = v + j * v_stride;
        B vv[static_cast<std::size_t>(kVecs)];
        if constexpr (kV == DType::kI8) {
#pragma GCC unroll 16
          for (int x = 0; x < kVecs; ++x) vv[x] = LoadI8AsFloat<Arch>(vj + c + x * kN);
        } else {
#pragma GCC unroll 16
          for (int x = 0; x < VC; ++x) {
            const std::int64_t at = c + x * kSpan;
            LoadI4Scaled<Arch>(vj + at / 2, Scale(vj + dv / 2 + at / kGroup * 4), vv[2 * x],
                               vv[2 * x + 1]);
          }
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          if (kSkipHidden && Float::IsHidden(p[r * p_stride + j])) continue;
          const B pr(p[r * p_stride + j]);
#pragma GCC unroll 16
          for (int x = 0; x < kVecs; ++x)
            a[r * kVecs + x] = xsimd::fma(pr, vv[x], a[r * kVecs + x]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int x = 0; x < kVecs; ++x) {
          a[r * kVecs + x].store_unaligned(acc + r * acc_stride + c + x * kN);
        }
      }
    }
    return c;
  }

  template <int R, int VC, bool kSkipHidden>
  static void AccumulateRows(const float* p, std::int64_t p_stride, const float* alpha,
                             const std::uint8_t* v, std::int64_t v_stride, std::int64_t kb,
                             std::int64_t dv, float* acc, std::int64_t acc_stride) {
    std::int64_t c = AccumulateChunks<R, VC, kSkipHidden>(p, p_stride, alpha, v, v_stride, kb, 0,
                                                          dv, acc, acc_stride);
    c = AccumulateChunks<R, 1, kSkipHidden>(p, p_stride, alpha, v, v_stride, kb, c, dv, acc,
                                            acc_stride);
    // int8 only (int4 rows are whole spans): the scale is already in p.
    for (; c < dv; ++c) {
      for (int r = 0; r < R; ++r) {
        float sum = acc[r * acc_stride + c] * alpha[r];
        for (std::int64_t j = 0; j < kb; ++j) {
          if (kSkipHidden && Float::IsHidden(p[r * p_stride + j])) continue;
          sum += p[r * p_stride + j] *
                 static_cast<float>(static_cast<std::int8_t>(v[j * v_stride + c]));
        }
        acc[r * acc_stride + c] = sum;
      }
    }
  }

  template <bool kSkipHidden>
  static void Accumulate(const AttendTile& t, std::int64_t rows_total, const float* s,
                         const float* alpha, const std::uint8_t* v, std::int64_t v_stride,
                         std::int64_t kb) {
    // int4 chunks hold two batches per span: half the spans of int8 per register tile.
    constexpr int kWide = kV == DType::kI8 ? 2 : 1;
    ForEachRowTile<Float::kWideRows, kWide, kWide, kWide>(
        rows_total, Float::kWideTileRows, [&]<int R, int VC>(std::int64_t r) {
          AccumulateRows<R, VC, kSkipHidden>(s + r * t.block, t.block, alpha + r, v, v_stride, kb,
                                             t.dv, t.acc + r * t.acc_stride, t.acc_stride);
        });
  }

  // kb stored rows of n values as f32 rows dst_stride apart, scales applied: in
  // value order for int8, in span order for int4 (the order the queries (K) and
  // the accumulator (V) keep).
  template <DType kDtype>
  static void DequantRows(const std::uint8_t* src, std::int64_t stride, std::int64_t kb,
                          std::int64_t n, float* dst, std::int64_t dst_stride) {
    for (std::int64_t j = 0; j < kb; ++j) {
      const std::uint8_t* row = src + j * stride;
      float* out = dst + j * dst_stride;
      if constexpr (kDtype == DType::kI8) {
        const float sc = Scale(row + n);
        std::int64_t c = 0;
        for (; c + kN <= n; c += kN)
          (LoadI8AsFloat<Arch>(row + c) * B(sc)).store_unaligned(out + c);
        for (; c < n; ++c) out[c] = I8Value(row, n, c);
      } else {
        for (std::int64_t c = 0; c < n; c += kSpan) {
          B even, odd;
          I4Span(row, n, c, even, odd);
          even.store_unaligned(out + c);
          odd.store_unaligned(out + c + kN);
        }
      }
    }
  }

  // Value c of an int8 row of n values, times the row's scale.
  static float I8Value(const std::uint8_t* row, std::int64_t n, std::int64_t c) {
    return static_cast<float>(static_cast<std::int8_t>(row[c])) * Scale(row + n);
  }

  // The span of an int4 row of n values that starts at value `span` (a multiple
  // of kSpan), scaled: its even values, then its odd ones.
  __attribute__((always_inline)) static void I4Span(const std::uint8_t* row, std::int64_t n,
                                                    std::int64_t span, B& even, B& odd) {
    LoadI4Scaled<Arch>(row + span / 2, Scale(row + n / 2 + span / kGroup * 4), even, odd);
  }

  // K dequantized straight into key-major columns (KeyMajor::ToColumns), in the
  // order DequantRows gives a row: value order for int8, span order for int4
  // (each int4 span is loaded once for its even and once for its odd values).
  static void KeyColumns(const std::uint8_t* k, std::int64_t k_stride, std::int64_t kb,
                         std::int64_t d, float* kt, std::int64_t kt_stride) {
    const auto row = [&](std::int64_t j, std::int64_t c) {
      const std::uint8_t* r = k + j * k_stride;
      if constexpr (kK == DType::kI8) {
        return LoadI8AsFloat<Arch>(r + c) * B(Scale(r + d));
      } else {
        const std::int64_t span = c - c % kSpan;
        B even, odd;
        I4Span(r, d, span, even, odd);
        return c == span ? even : odd;
      }
    };
    // int4: d % kSpan == 0, so only int8 has a scalar tail.
    const auto scalar = [&](std::int64_t j, std::int64_t c) {
      return I8Value(k + j * k_stride, d, c);
    };
    KeyMajor<Arch>::ToColumns(kb, d, kt, kt_stride, row, scalar);
  }

  // A prefill-sized tile's block (kDequantTileRows, attend_tile.h): K
  // dequantized once into key-major columns and V into rows, in the scratch past
  // the float kernel's part, then the float kernel's steps over them. The scores
  // equal q . (scale q8) rather than (q . q8) scale: the same sum, rounded in
  // another order.
  static void DequantBlock(const AttendTile& t, std::int64_t rows_total, std::int64_t qd,
                           const float* qs, float* s, float* alpha, const std::uint8_t* k,
                           std::int64_t k_stride, const std::uint8_t* v, std::int64_t v_stride,
                           std::int64_t tb, std::int64_t kb) {
    if (Float::BlockHidden(t, tb, kb)) return;
    const typename Float::ConvertedRows to = Float::ConvertedScratch(t, rows_total, qd);
    KeyColumns(k, k_stride, kb, t.d, to.kt, to.kt_stride);
    DequantRows<kV>(v, v_stride, kb, t.dv, to.v, to.v_stride);
    Float::KeyMajorBlock(t, rows_total, qd, qs, s, alpha, to.kt, to.kt_stride, to.v, to.v_stride,
                         tb, kb, /*bf16_weights=*/false);
  }

  static void Block(const AttendTile& t, std::int64_t rows_total, std::int64_t qd, const float* qs,
                    float* s, float* alpha, const std::uint8_t* k, std::int64_t k_stride,
                    const std::uint8_t* v, std::int64_t v_stride, std::int64_t tb, std::int64_t kb,
                    const Prefetch& pf, const IntDecode& id) {
    if (rows_total >= kDequantTileRows) {
      DequantBlock(t, rows_total, qd, qs, s, alpha, k, k_stride, v, v_stride, tb, kb);
      return;
    }
    if (Float::BlockHidden(t, tb, kb)) return;
    const Prefetch none;
    bool scored = false;
    if (id.scores) {
      ForEachRowTile<0, 1, kIntScoreKeys, 1>(rows_total, 0, [&]<int R, int K>(std::int64_t r) {
        IntScoreRows<R, K>(id.q + r * id.q_stride, id.q_stride, id.qscale + r, k, k_stride, kb, t.d,
                           s + r * t.block, t.block, r == 0 ? pf : none, r == 0 ? id.next_k : none);
      });
      if constexpr (kK == DType::kI8) ScaleScores(t, rows_total, id.qscale, k, k_stride, kb, s);
      scored = true;
    }
    if (!scored) {
      ForEachRowTile<Float::kWideRows, kWideScoreKeys, kScoreKeys, 2>(
          rows_total, Float::kWideTileRows, [&]<int R, int K>(std::int64_t r) {
            ScoreRows<R, K>(qs + r * qd, qd, k, k_stride, kb, t.d, s + r * t.block, t.block,
                            r == 0 ? pf : none);
          });
    }
    if (!Float::MaskBlock(t, tb, kb, s)) return;
    const bool any_hidden = Float::Softmax(t, rows_total, kb, s, alpha);
    if constexpr (kV == DType::kI8) {
      const bool finite = FoldVScales(t, rows_total, s, v, v_stride, kb, id.wscale);
      if (id.values && finite) {
        IntAccumulate(t, rows_total, s, alpha, id.wscale, v, v_stride, kb, id.next_v);
        return;
      }
    } else if (id.values && QuantizeGroupWeights(t, rows_total, s, v, v_stride, kb, id)) {
      IntAccumulateI4(t, rows_total, alpha, v, v_stride, kb, id);
      return;
    }
    if (any_hidden) {
      Accumulate<true>(t, rows_total, s, alpha, v, v_stride, kb);
    } else {
      Accumulate<false>(t, rows_total, s, alpha, v, v_stride, kb);
    }
  }

  // dst = q * scale, in span order for int4 K: each span of 2 * kN values as its
  // even values, then its odd ones.
  static void ScaleQuery(const float* q, float scale, std::int64_t d, float* dst) {
    if constexpr (kK == DType::kI8) {
      for (std::int64_t c = 0; c < d; ++c) dst[c] = q[c] * scale;
    } else {
      for (std::int64_t c = 0; c < d; c += kSpan) {
        for (std::int64_t i = 0; i < kN; ++i) {
          dst[c + i] = q[c + 2 * i] * scale;
          dst[c + kN + i] = q[c + 2 * i + 1] * scale;
        }
      }
    }
  }

  // int4 V: the accumulator rows back from span order to value order.
  static void UnpermuteAcc(const AttendTile& t, std::int64_t rows_total) {
    for (std::int64_t r = 0; r < rows_total; ++r) {
      float* row = t.acc + r * t.acc_stride;
      for (std::int64_t c = 0; c < t.dv; c += kSpan) {
        alignas(64) float tmp[static_cast<std::size_t>(kSpan)];
        for (std::int64_t i = 0; i < kN; ++i) {
          tmp[2 * i] = row[c + i];
          tmp[2 * i + 1] = row[c + kN + i];
        }
        for (std::int64_t i = 0; i < kSpan; ++i) row[c + i] = tmp[i];
      }
    }
  }

  static void Attend(const AttendTile& t) {
    const auto w =
        Float::Begin(t, [&](const float* q, float* dst) { ScaleQuery(q, t.scale, t.d, dst); });
    // Per-row factors past alpha, in the rows_total * 16 floats of padding the
    // scratch has there, and the int4 value weights past the float part
    // (attend_tile.h, BlockScratchFloats). int4 rows take the integer steps when
    // they are whole runs (always but on AVX-512 with 32 or 96 values).
    IntDecode id;
    if (w.rows_total < kDequantTileRows) {
      id.qscale = w.alpha + w.rows_total;
      id.wscale = w.alpha + 2 * w.rows_total;
      if (kK == DType::kI8 || t.d % kRun == 0) {
        id.scores = QuantizeQueries(w.rows_total, t.d, w.qd, w.qs, id.qscale);
        id.q = reinterpret_cast<const std::int16_t*>(w.qs);
        id.q_stride = 2 * w.qd;
      }
      id.values = kV == DType::kI8 || t.dv % kRun == 0;
      if constexpr (kV == DType::kI4) {
        id.w_group_stride = DecodeWeightKeys(t.block);
        id.w_row_stride = t.dv / kGroup * id.w_group_stride;
        id.weights =
            reinterpret_cast<std::int16_t*>(t.scratch + w.rows_total * (w.qd + t.block + 16));
      }
    }
    const auto k_bytes = static_cast<std::int64_t>(RowBytes(kK, t.d));
    const auto v_bytes = static_cast<std::int64_t>(RowBytes(kV, t.dv));
    Float::ForEachBlock(
        t, [&](const KvRun& run, std::int64_t tb, std::int64_t kb, std::int64_t next_kb) {
          const auto* k = static_cast<const std::uint8_t*>(run.k) + (tb - run.begin) * run.k_stride;
          const auto* v = static_cast<const std::uint8_t*>(run.v) + (tb - run.begin) * run.v_stride;
          const Prefetch pf{.k = k,
                            .v = v,
                            .k_stride = run.k_stride,
                            .v_stride = run.v_stride,
                            .rows = kb,
                            .k_bytes = k_bytes,
                            .v_bytes = v_bytes};
          IntDecode block_id = id;
          if (next_kb > 0) {
            block_id.next_k = Prefetch{.k = k + kb * run.k_stride,
                                       .k_stride = run.k_stride,
                                       .rows = next_kb,
                                       .k_bytes = k_bytes};
            block_id.next_v = Prefetch{.k = v + kb * run.v_stride,
                                       .k_stride = run.v_stride,
                                       .rows = next_kb,
                                       .k_bytes = v_bytes};
          }
          Block(t, w.rows_total, w.qd, w.qs, w.s, w.alpha, k, run.k_stride, v, run.v_stride, tb, kb,
                pf, block_id);
        });
    if constexpr (kV == DType::kI4) UnpermuteAcc(t, w.rows_total);
  }
};

template <class Arch>
void AttendQuantized(const AttendTile& tile) noexcept {
  const bool k8 = tile.k_dtype == DType::kI8;
  const bool v8 = tile.v_dtype == DType::kI8;
  if (k8 && v8) {
    QuantAttender<Arch, DType::kI8, DType::kI8>::Attend(tile);
  } else if (k8) {
    QuantAttender<Arch, DType::kI8, DType::kI4>::Attend(tile);
  } else if (v8) {
    QuantAttender<Arch, DType::kI4, DType::kI8>::Attend(tile);
  } else {
    QuantAttender<Arch, DType::kI4, DType::kI4>::Attend(tile);
  }
}

}  // namespace
}  // namespace ringkv::kernels
