#pragma once
// The AArch64 Advanced SIMD (NEON) intrinsics behind simd_compat-inl.h, the
// counterparts of simd_x86-inl.h for xsimd::neon64 (4 f32 lanes): widening and
// narrowing loads and stores, f16 conversion and the transpose-add. Included
// only through simd_compat-inl.h, and only when compiling for AArch64; the same
// rules hold (anonymous namespace, arch always named). The arm_neon.h
// intrinsics are always-inline, so they leave no weak symbol behind.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <xsimd/xsimd.hpp>

namespace ringkv::kernels {
namespace {

template <class Arch>
constexpr std::size_t kNeonLanes = xsimd::batch<float, Arch>::size;

// An empty asm that makes the compiler hold `raw` in a SIMD register ("w") at
// this point. AArch64 FMLA takes no memory operand, so this changes little here;
// it is the x86 helper's counterpart (simd_x86-inl.h says why it exists).
template <class Register>
__attribute__((always_inline)) inline void PinToVectorRegister(Register& raw) {
  asm("" : "+w"(raw));
}

// FCVTL / FCVTN (f16 <-> f32) are base AArch64 Advanced SIMD, not FEAT_FP16, so
// every NEON tier converts f16 in registers. With the default FPCR (round to
// nearest even, no flush to zero, no default NaN) both are bit-exact with
// F16ToF32 / F32ToF16, and a NaN comes out quiet with its top payload bits, as
// the scalar tail (ScalarToFloat) makes it.
template <class Arch>
constexpr bool kNativeF16 = true;

// No one-instruction power-of-two scaling here (simd_x86-inl.h): the exp sets
// the exponent bits itself.
template <class Arch>
constexpr bool kScalef = false;
template <class Arch>
xsimd::batch<float, Arch> ScalefUnless(const xsimd::batch<float, Arch>& y,
                                       const xsimd::batch<float, Arch>& n,
                                       const xsimd::batch_bool<float, Arch>& zero);

// No bf16 dot products here (simd_x86-inl.h): bf16 K is widened to f32.
template <class Arch>
constexpr bool kBf16Dot = false;
template <class Arch>
struct Bf16Dot;

// Loads 4 f16 values as f32 (FCVTL).
template <class Arch>
xsimd::batch<float, Arch> LoadF16Native(const std::uint16_t* p) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

// Stores 4 f32 values as f16, rounding to nearest even (FCVTN).
template <class Arch>
void StoreF16Native(const xsimd::batch<float, Arch>& v, std::uint16_t* p) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}

// sums[i] = sum of rows[i]'s lanes for 4 rows: three pairwise adds (FADDP).
// Forced inline: as an out-of-line call (GCC's choice for xsimd's haddp) it
// takes the accumulators by address, and GCC then stored all of them to the
// stack on every iteration of the dot-product loop.
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> TransposeAdd(
    const xsimd::batch<float, Arch>* rows) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  const float32x4_t ab = vpaddq_f32(rows[0], rows[1]);  // a0+a1 a2+a3 b0+b1 b2+b3
  const float32x4_t cd = vpaddq_f32(rows[2], rows[3]);
  return vpaddq_f32(ab, cd);
}

// Transposes the 4 x 4 floats held in rows[0 .. 3]: row i lane c goes to row
// c lane i (TRN1 / TRN2 on pairs of rows, then their halves recombined).
template <class Arch>
__attribute__((always_inline)) inline void Transpose(xsimd::batch<float, Arch>* rows) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  const float32x4x2_t p01 = vtrnq_f32(rows[0], rows[1]);  // a0 b0 a2 b2 | a1 b1 a3 b3
  const float32x4x2_t p23 = vtrnq_f32(rows[2], rows[3]);
  rows[0] = vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0]));
  rows[1] = vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1]));
  rows[2] = vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0]));
  rows[3] = vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1]));
}

// The x86 16-lane helpers of these names (simd_x86-inl.h); NEON batches have 4
// lanes, so the kernels never call them here.
template <class Arch>
xsimd::batch<std::int32_t, Arch> TransposeAddI32(const xsimd::batch<std::int32_t, Arch>* rows) {
  static_assert(kNeonLanes<Arch> == 16, "16-lane batches only");
  return rows[0];
}
template <class Arch>
void StoreQuarters(const xsimd::batch<float, Arch>&, float*, std::int64_t, const float*) {
  static_assert(kNeonLanes<Arch> == 16, "16-lane batches only");
}
template <class Arch>
xsimd::batch<float, Arch> SumLaneQuadsI32(const xsimd::batch<std::int32_t, Arch>* rows) {
  static_assert(kNeonLanes<Arch> == 16, "16-lane batches only");
  return xsimd::batch_cast<float>(rows[0]);
}
template <class Arch>
xsimd::batch<float, Arch> SumQuarterParts(const xsimd::batch<float, Arch>* parts) {
  static_assert(kNeonLanes<Arch> == 16, "16-lane batches only");
  return parts[0];
}

// Zero-extends 4 16-bit values (UXTL).
template <class Arch>
xsimd::batch<std::uint32_t, Arch> LoadWidenU16(const std::uint16_t* p) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  return vmovl_u16(vld1_u16(p));
}

// Stores the low 16 bits of each lane (XTN); every lane must be <= 0xFFFF, as
// for the x86 packs.
template <class Arch>
void StoreNarrowU16(const xsimd::batch<std::uint32_t, Arch>& v, std::uint16_t* p) {
  vst1_u16(p, vmovn_u32(v));
}

// Sign-extends 4 int8 values to int32 lanes (two SXTLs). Reads exactly 4 bytes.
template <class Arch>
xsimd::batch<std::int32_t, Arch> LoadWidenI8(const std::uint8_t* p) {
  static_assert(kNeonLanes<Arch> == 4, "NEON batches are 4 f32 lanes");
  std::uint32_t word;
  __builtin_memcpy(&word, p, sizeof word);
  const int8x8_t bytes = vreinterpret_s8_u32(vdup_n_u32(word));
  return vmovl_s16(vget_low_s16(vmovl_s8(bytes)));
}

// Stores the low byte of each lane; every lane must be in [-128, 127] (the
// saturating narrows, SQXTN, are exact in that range). Writes exactly 4 bytes.
template <class Arch>
void StoreNarrowI8(const xsimd::batch<std::int32_t, Arch>& v, std::uint8_t* p) {
  const int16x4_t halves = vqmovn_s32(v);
  const int8x8_t bytes = vqmovn_s16(vcombine_s16(halves, halves));
  const std::uint32_t word = vget_lane_u32(vreinterpret_u32_s8(bytes), 0);
  __builtin_memcpy(p, &word, sizeof word);
}

// Lane i = the f32 at base + i * stride bytes, any alignment (lane by lane).
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> StridedF32(const std::uint8_t* base,
                                                                           std::int64_t stride) {
  float f[4];
  for (int i = 0; i < 4; ++i) __builtin_memcpy(&f[i], base + i * stride, sizeof(float));
  return vld1q_f32(f);
}

// out[g] lane i = the f32 at base + i * stride + 4 g bytes, for g < 4 (the x86
// contract): four row loads and the 4 x 4 transposition.
template <class Arch>
__attribute__((always_inline)) inline void StridedF32Quads(const std::uint8_t* base,
                                                           std::int64_t stride,
                                                           xsimd::batch<float, Arch>* out) {
  for (int i = 0; i < 4; ++i) {
    float f[4];
    __builtin_memcpy(f, base + i * stride, sizeof f);
    out[i] = vld1q_f32(f);
  }
  Transpose<Arch>(out);
}

// int16 multiply-add for the integer decode path of the quantized attend kernel
// (simd_x86-inl.h has the contract): SMULL / SMULL2 and a pairwise add stand in
// for pmaddwd, and the zips interleave in value order.
template <class Arch>
struct I16Dot {
  using I = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::int64_t kLanes = 8;

  __attribute__((always_inline)) static I WidenI8(const std::uint8_t* p) {
    return vreinterpretq_s32_s16(vmovl_s8(vld1_s8(reinterpret_cast<const std::int8_t*>(p))));
  }
  __attribute__((always_inline)) static void WidenI4(const std::uint8_t* p, I& even, I& odd) {
    const int16x8_t w = vmovl_s8(vld1_s8(reinterpret_cast<const std::int8_t*>(p)));
    even = vreinterpretq_s32_s16(vshrq_n_s16(vshlq_n_s16(w, 12), 12));
    odd = vreinterpretq_s32_s16(vshrq_n_s16(w, 4));
  }
  __attribute__((always_inline)) static I Load(const std::int16_t* p) {
    return vreinterpretq_s32_s16(vld1q_s16(p));
  }
  __attribute__((always_inline)) static I BroadcastPair(const std::int16_t* p) {
    std::int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return vdupq_n_s32(pair);
  }
  __attribute__((always_inline)) static I Madd(const I& a, const I& b) {
    const int16x8_t x = vreinterpretq_s16_s32(a);
    const int16x8_t y = vreinterpretq_s16_s32(b);
    return vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
  }
  __attribute__((always_inline)) static I MaddAdd(const I& acc, const I& a, const I& b) {
    return acc + Madd(a, b);
  }
  __attribute__((always_inline)) static void MaddAddInPlace(I& acc, const I& a, const I& b) {
    acc = MaddAdd(acc, a, b);
  }
  __attribute__((always_inline)) static I InterleaveLo(const I& a, const I& b) {
    return vreinterpretq_s32_s16(vzip1q_s16(vreinterpretq_s16_s32(a), vreinterpretq_s16_s32(b)));
  }
  __attribute__((always_inline)) static I InterleaveHi(const I& a, const I& b) {
    return vreinterpretq_s32_s16(vzip2q_s16(vreinterpretq_s16_s32(a), vreinterpretq_s16_s32(b)));
  }
  __attribute__((always_inline)) static void InOrder(I&, I&) {}
  __attribute__((always_inline)) static I Narrow(const I& a, const I& b) {
    return vreinterpretq_s32_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b)));
  }
};

}  // namespace
}  // namespace ringkv::kernels
