#pragma once
// Shims over xsimd 8.1 shared by every per-ISA translation unit: horizontal
// reductions (reduce_add/reduce_max arrived in 9.0), loads/stores that convert
// f16/bf16 to and from f32 in registers (8.1 has no half batch types), and a
// vectorised byte copy.
//
// Included only by the isa_*.cc units. Everything is in an anonymous namespace,
// so each unit gets its own copy with internal linkage: a shared inline function
// would be a weak symbol, and the linker could keep the AVX-512 copy for every
// caller (docs/kernels.md, "linkage"). For the same reason, call no std::
// function templates (std::min, std::max, std::copy, ...) from -inl.h code, and
// avoid xsimd entry points that call them: 8.1's converting
// batch<uint32_t>::load_unaligned(const uint16_t*) goes through std::copy, so the
// 16 -> 32 bit widening below uses the intrinsics directly.
// Always name the arch: batch<float, Arch>, never batch<float>.
//
// At -O0 GCC and Clang emit every xsimd function a kernel calls as a weak
// (COMDAT) symbol, and neither `flatten` nor `#pragma GCC optimize` stops it:
// the per-ISA units need -O1 or more in every configuration
// (tools/check_isa_linkage.sh checks the objects of each build).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "ringkv/kernels/dtype.h"

// The intrinsics each architecture family needs where xsimd 8.1 has no generic
// operation (16/8-bit widening and narrowing, f16 conversion in registers, a
// 16-lane transpose-add), so that no x86 header or intrinsic reaches a NEON unit
// and no NEON one an x86 unit.
#if defined(__x86_64__) || defined(__i386__)
#include "simd_x86-inl.h"
#elif defined(__aarch64__)
#include "simd_neon-inl.h"
#else
#error "ringkv's SIMD tiers are for x86-64 and AArch64; other targets build the scalar tier only"
#endif

namespace ringkv::kernels {
namespace {

template <class Arch>
using FloatBatch = xsimd::batch<float, Arch>;

template <class Arch>
float ReduceAdd(const FloatBatch<Arch>& v) {
  return xsimd::hadd(v);
}

template <class Arch>
float ReduceMax(const FloatBatch<Arch>& v) {
  alignas(64) float lanes[FloatBatch<Arch>::size];
  v.store_aligned(lanes);
  float m = lanes[0];
  for (std::size_t i = 1; i < FloatBatch<Arch>::size; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

// Element tags: which stored type a pointer holds.
struct F32Tag {
  using Stored = float;
  static constexpr DType kDType = DType::kF32;
};
struct F16Tag {
  using Stored = std::uint16_t;
  static constexpr DType kDType = DType::kF16;
};
struct BF16Tag {
  using Stored = std::uint16_t;
  static constexpr DType kDType = DType::kBF16;
};

// One element of Tag as f32 and back (tails), the same rounding as the batches.
template <class Tag>
float ScalarToFloat(typename Tag::Stored x) {
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    return x;
  } else if constexpr (std::is_same_v<Tag, F16Tag>) {
    // A NaN comes out quiet, as vcvtph2ps makes it, so that a tier's vector body
    // and its tail agree (F16ToF32 keeps a signalling NaN signalling).
    const float wide = F16ToF32(x);
    return (x & 0x7FFFu) > 0x7C00u
               ? std::bit_cast<float>(std::bit_cast<std::uint32_t>(wide) | 0x400000u)
               : wide;
  } else {
    return BF16ToF32(x);
  }
}

template <class Tag>
typename Tag::Stored ScalarFromFloat(float x) {
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    return x;
  } else if constexpr (std::is_same_v<Tag, F16Tag>) {
    return F32ToF16(x);
  } else {
    return F32ToBF16(x);
  }
}

// Reinterprets the lanes. Not xsimd 8.1's bitwise_cast<batch<To, Arch>>: its
// neon version is a call through a function table that GCC 12 leaves out of
// line, a call per converted bf16 vector in the dot-product loops. The builtin
// (not the std::bit_cast template, see above) is a register move or nothing.
template <class To, class From, class Arch>
xsimd::batch<To, Arch> BitCast(const xsimd::batch<From, Arch>& x) {
  return __builtin_bit_cast(xsimd::batch<To, Arch>, x);
}

template <class Arch>
using U32Batch = xsimd::batch<std::uint32_t, Arch>;
template <class Arch>
using I32Batch = xsimd::batch<std::int32_t, Arch>;

// f16 bits (zero-extended) -> f32 without F16C (the SSE4.2 tier), integer only like F16ToF32:
// normals rebias the exponent, Inf/NaN keep their payload, subnormals are
// mantissa * 2^-24 (exact: the int -> float conversion and the power-of-two
// scale are both exact, and the result is an f32 normal). Forced inline: GCC
// left it out of line, a call per converted vector that took 40 % of an SSE4.2
// f16 decode.
template <class Arch>
__attribute__((always_inline)) inline FloatBatch<Arch> F16BitsToFloat(const U32Batch<Arch>& h) {
  using I = I32Batch<Arch>;
  using B = FloatBatch<Arch>;
  const I bits = BitCast<std::int32_t>(h);
  const I sign = (bits & I(0x8000)) << 16;
  const I em = bits & I(0x7FFF);
  const I exponent = em & I(0x7C00);
  const I normal = (em << 13) + I(112 << 23);
  // Inf keeps a zero mantissa; a NaN keeps its payload and is made quiet (bit 22),
  // as vcvtph2ps does.
  const I quiet = xsimd::select(em > I(0x7C00), I(0x400000), I(0));
  const I inf_nan = (em << 13) | I(0x7F800000) | quiet;
  const I subnormal = BitCast<std::int32_t>(xsimd::batch_cast<float>(em) * B(0x1p-24f));
  const I out = xsimd::select(exponent == I(0x7C00), inf_nan,
                              xsimd::select(exponent == I(0), subnormal, normal));
  return BitCast<float>(out | sign);
}

// f32 -> f16 bits without F16C, integer only like F32ToF16, for lanes whose
// result is zero, normal, Inf or NaN. Sets `has_subnormal` when a lane would be a
// nonzero f16 subnormal: that needs a per-lane variable shift SSE4.2 lacks, so
// the caller converts such (rare) batches lane by lane.
template <class Arch>
U32Batch<Arch> FloatToF16Bits(const FloatBatch<Arch>& v, bool& has_subnormal) {
  using I = I32Batch<Arch>;
  const I x = BitCast<std::int32_t>(v);
  const I sign = (x >> 16) & I(0x8000);
  const I mag = x & I(0x7FFFFFFF);
  // Rebias to the half exponent, then round the 13 dropped bits to nearest even;
  // a carry ripples into the exponent, up to Inf (0x7C00).
  const I rebased = mag - I(112 << 23);
  const I normal = (rebased + I(0xFFF) + ((rebased >> 13) & I(1))) >> 13;
  const I nan = I(0x7E00) | ((mag >> 13) & I(0x3FF));  // quiet, top payload bits
  const I out = xsimd::select(mag > I(0x7F800000), nan,
                              xsimd::select(mag >= I(0x47800000), I(0x7C00),  // |v| >= 65536: Inf
                                            xsimd::select(mag >= I(0x38800000), normal, I(0))));
  // [2^-25, 2^-14): rounds to a subnormal (or up to the smallest normal).
  has_subnormal = xsimd::any((mag >= I(0x33000000)) & (mag < I(0x38800000)));
  return BitCast<std::uint32_t>(out | sign);
}

// Loads FloatBatch<Arch>::size elements of type Tag from p as f32. Forced
// inline because it sits in every K/V loop: GCC left the NEON bf16 instance out
// of line (xsimd 8.1's neon shifts go through function tables it deems costly).
template <class Arch, class Tag>
__attribute__((always_inline)) inline FloatBatch<Arch> LoadAsFloat(const typename Tag::Stored* p) {
  using B = FloatBatch<Arch>;
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    return B::load_unaligned(p);
  } else if constexpr (std::is_same_v<Tag, BF16Tag>) {
    // bf16 is the top half of an f32: widen to 32 bits and shift into place.
    return BitCast<float>(LoadWidenU16<Arch>(p) << 16);
  } else if constexpr (kNativeF16<Arch>) {
    return LoadF16Native<Arch>(p);
  } else {
    return F16BitsToFloat<Arch>(LoadWidenU16<Arch>(p));
  }
}

// Requests the cache line holding p into L2 (prefetcht1 on x86, PRFM PLDL2KEEP
// on AArch64), the kernels' only software prefetch. A request into L1 holds one
// of the core's few L1 miss buffers until the line comes from DRAM, and with
// every K/V line requested that way one core's decode read no faster than
// about 12.7 GB/s on the Zen 4 host, whatever the dtype, against 29 GB/s for a
// plain stream; requested into L2, the lines are there when the loads miss L1
// (docs/attention_tuning.md, "K/V requested into L2"). Forced inline: GCC deems
// an out-of-line function that only prefetches "const" and deletes its calls.
__attribute__((always_inline)) inline void RequestLine(const void* p) {
  __builtin_prefetch(p, 0, 2);
}

// One element of type Tag as f32 (the scalar tails of the vector loops).
template <class Tag>
float LoadScalarAsFloat(const typename Tag::Stored* p) {
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    return *p;
  } else if constexpr (std::is_same_v<Tag, BF16Tag>) {
    const std::uint32_t bits = static_cast<std::uint32_t>(*p) << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    return F16ToF32(*p);
  }
}

// Stores v to p as Tag, rounding to nearest even; NaN stays NaN. Forced inline:
// GCC called the SSE4.2 f16 and NEON bf16 instances once per vector from the
// conversion loops of the cache write.
template <class Arch, class Tag>
__attribute__((always_inline)) inline void StoreFromFloat(const FloatBatch<Arch>& v,
                                                          typename Tag::Stored* p) {
  using B = FloatBatch<Arch>;
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    v.store_unaligned(p);
  } else if constexpr (std::is_same_v<Tag, BF16Tag>) {
    using U = U32Batch<Arch>;
    const U bits = BitCast<std::uint32_t>(v);
    const U lsb = (bits >> 16) & U(1u);
    const U rounded = (bits + U(0x7FFFu) + lsb) >> 16;
    const U quiet_nan = (bits >> 16) | U(0x40u);
    // xsimd::isnan is an unordered compare on every tier; 8.1's float != is
    // _CMP_NEQ_OQ on AVX and AVX-512, false for NaN, so `v != v` misses NaNs
    // there. The select is on floats: 8.1's integer select for avx512bw does not
    // compile at -O0.
    const B out =
        xsimd::select(xsimd::isnan(v), BitCast<float>(quiet_nan), BitCast<float>(rounded));
    StoreNarrowU16<Arch>(BitCast<std::uint32_t>(out), p);
  } else if constexpr (kNativeF16<Arch>) {
    StoreF16Native<Arch>(v, p);
  } else {
    bool has_subnormal = false;
    const U32Batch<Arch> h = FloatToF16Bits<Arch>(v, has_subnormal);
    if (!has_subnormal) {
      StoreNarrowU16<Arch>(h, p);
      return;
    }
    alignas(64) float lanes[B::size];
    v.store_aligned(lanes);
    for (std::size_t i = 0; i < B::size; ++i) p[i] = F32ToF16(lanes[i]);
  }
}

// dst[0, bytes) = src[0, bytes); the ranges must not overlap. Batches of bytes,
// unaligned, four at a time; the tail is one overlapping batch when the copy is
// at least a batch long, else fixed-size moves.
template <class Arch>
void CopyBytes(const std::uint8_t* src, std::uint8_t* dst, std::size_t bytes) {
  using V = xsimd::batch<std::uint8_t, Arch>;
  constexpr std::size_t kW = V::size;
  std::size_t i = 0;
  for (; i + 4 * kW <= bytes; i += 4 * kW) {
    const V a = V::load_unaligned(src + i);
    const V b = V::load_unaligned(src + i + kW);
    const V c = V::load_unaligned(src + i + 2 * kW);
    const V d = V::load_unaligned(src + i + 3 * kW);
    a.store_unaligned(dst + i);
    b.store_unaligned(dst + i + kW);
    c.store_unaligned(dst + i + 2 * kW);
    d.store_unaligned(dst + i + 3 * kW);
  }
  for (; i + kW <= bytes; i += kW) V::load_unaligned(src + i).store_unaligned(dst + i);
  if (i == bytes) return;
  if (bytes >= kW) {
    V::load_unaligned(src + bytes - kW).store_unaligned(dst + bytes - kW);
    return;
  }
  // Fewer than kW bytes in all: 8/4/2/1-byte moves (memcpy of a constant size is
  // a plain load and store).
  for (; i + 8 <= bytes; i += 8) __builtin_memcpy(dst + i, src + i, 8);
  if (i + 4 <= bytes) {
    __builtin_memcpy(dst + i, src + i, 4);
    i += 4;
  }
  if (i + 2 <= bytes) {
    __builtin_memcpy(dst + i, src + i, 2);
    i += 2;
  }
  if (i < bytes) dst[i] = src[i];
}

}  // namespace
}  // namespace ringkv::kernels
