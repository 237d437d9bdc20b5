#pragma once
// Shims over xsimd 8.1 shared by every per-ISA translation unit: horizontal
// reductions (reduce_add/reduce_max arrived in 9.0) and loads/stores that convert
// f16/bf16 to and from f32 in registers (8.1 has no half batch types).
//
// Included only by the isa_*.cc units. Everything is in an anonymous namespace,
// so each unit gets its own copy with internal linkage: a shared inline function
// would be a weak symbol, and the linker could keep the AVX-512 copy for every
// caller (docs/kernels.md, "linkage"). For the same reason, call no std::
// function templates (std::min, std::max, ...) from -inl.h code.
// Always name the arch: batch<float, Arch>, never batch<float>.

#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "ringkv/kernels/dtype.h"

namespace ringkv::kernels {
namespace {

template <class Arch>
using FloatBatch = xsimd::batch<float, Arch>;

template <class Arch>
constexpr bool kHasF16c = std::is_base_of_v<xsimd::avx2, Arch>;  // our AVX2+ tiers require F16C

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

// Loads FloatBatch<Arch>::size elements of type Tag from p as f32.
template <class Arch, class Tag>
FloatBatch<Arch> LoadAsFloat(const typename Tag::Stored* p) {
  using B = FloatBatch<Arch>;
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    return B::load_unaligned(p);
  } else if constexpr (std::is_same_v<Tag, BF16Tag>) {
    // bf16 is the top half of an f32: widen to 32 bits and shift into place.
    const auto wide = xsimd::batch<std::uint32_t, Arch>::load_unaligned(p);
    return xsimd::bitwise_cast<float>(wide << 16);
  } else if constexpr (kHasF16c<Arch> && B::size == 16) {
    return B(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  } else if constexpr (kHasF16c<Arch> && B::size == 8) {
    return B(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else {
    alignas(64) float lanes[B::size];
    for (std::size_t i = 0; i < B::size; ++i) lanes[i] = F16ToF32(p[i]);
    return B::load_aligned(lanes);
  }
}

// Stores v to p as Tag, rounding to nearest even; NaN stays NaN.
template <class Arch, class Tag>
void StoreFromFloat(const FloatBatch<Arch>& v, typename Tag::Stored* p) {
  using B = FloatBatch<Arch>;
  if constexpr (std::is_same_v<Tag, F32Tag>) {
    v.store_unaligned(p);
  } else if constexpr (std::is_same_v<Tag, BF16Tag>) {
    using U = xsimd::batch<std::uint32_t, Arch>;
    const U bits = xsimd::bitwise_cast<std::uint32_t>(v);
    const U lsb = (bits >> 16) & U(1u);
    const U rounded = (bits + U(0x7FFFu) + lsb) >> 16;
    const U quiet_nan = (bits >> 16) | U(0x40u);
    const U out = xsimd::select(v != v, quiet_nan, rounded);  // NaN != NaN
    alignas(64) std::uint32_t lanes[U::size];
    out.store_aligned(lanes);
    for (std::size_t i = 0; i < U::size; ++i) p[i] = static_cast<std::uint16_t>(lanes[i]);
  } else if constexpr (kHasF16c<Arch> && B::size == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else if constexpr (kHasF16c<Arch> && B::size == 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    alignas(64) float lanes[B::size];
    v.store_aligned(lanes);
    for (std::size_t i = 0; i < B::size; ++i) p[i] = F32ToF16(lanes[i]);
  }
}

}  // namespace
}  // namespace ringkv::kernels
