#pragma once
// The x86-64 intrinsics behind simd_compat-inl.h (SSE4.2, AVX2 + F16C,
// AVX-512): widening and narrowing loads and stores, f16 conversion and the
// 16-lane transpose-add. Included only through simd_compat-inl.h, and only when
// compiling for x86; the same rules hold (anonymous namespace, arch always named).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <xsimd/xsimd.hpp>

namespace ringkv::kernels {
namespace {

// An empty asm that makes the compiler hold `raw` in a vector register at this
// point. "v", not "x": with AVX-512 enabled "x" allows only registers 0-15, so
// the 4 x 4 score tile of attend-inl.h would have to fit in half the register file.
template <class Register>
__attribute__((always_inline)) inline void PinToVectorRegister(Register& raw) {
  asm("" : "+v"(raw));
}

// Whether the tier converts f16 in registers. Our AVX2 tier requires F16C, and every AVX-512F CPU
// has it (vcvtph2ps zmm is AVX-512F itself). Note that in xsimd 8.1 avx512f derives from generic,
// not avx2.
template <class Arch>
constexpr bool kNativeF16 =
    std::is_base_of_v<xsimd::avx2, Arch> || std::is_base_of_v<xsimd::avx512f, Arch>;

// Whether the tier scales by a power of two in one instruction (vscalefps,
// AVX-512F), which spares the exp of attend-inl.h its exponent-bit arithmetic.
template <class Arch>
constexpr bool kScalef = std::is_base_of_v<xsimd::avx512f, Arch>;

// y * 2^n lane by lane for integral n, and +0 in the lanes of `zero`; only for
// kScalef archs. Correctly rounded like a multiply by the power of two.
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> ScalefUnless(
    const xsimd::batch<float, Arch>& y, const xsimd::batch<float, Arch>& n,
    const xsimd::batch_bool<float, Arch>& zero) {
  const auto keep = static_cast<__mmask16>(~static_cast<__mmask16>(zero));
  return _mm512_maskz_scalef_ps(keep, y, n);
}

// Loads xsimd::batch<float, Arch>::size f16 values as f32 (vcvtph2ps); only
// for kNativeF16 archs.
template <class Arch>
xsimd::batch<float, Arch> LoadF16Native(const std::uint16_t* p) {
  if constexpr (xsimd::batch<float, Arch>::size == 16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    static_assert(xsimd::batch<float, Arch>::size == 8, "F16C batches are 8 or 16 lanes");
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// Stores v as f16, rounding to nearest even (vcvtps2ph); only for kNativeF16 archs.
template <class Arch>
void StoreF16Native(const xsimd::batch<float, Arch>& v, std::uint16_t* p) {
  if constexpr (xsimd::batch<float, Arch>::size == 16) {
    // The maskz form with an explicit all-ones mask: GCC's -O0 macro for the
    // unmasked one passes -1 as the mask and trips -Wsign-conversion.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(static_cast<__mmask16>(0xFFFF), v,
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    static_assert(xsimd::batch<float, Arch>::size == 8, "F16C batches are 8 or 16 lanes");
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// The 16-lane transpose-add on float or int32 rows (AVX-512 only): the
// shuffles move bits alike, only the adds follow the element type.
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 AddLanes16(__m512 a, __m512 b) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_add_ps(a, b);
  } else {
    static_assert(std::is_same_v<T, std::int32_t>, "float or int32 lanes");
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
}
// The three folds of the 16-lane transpose-add, each adding two registers'
// halves so that a and b come out side by side. With a_i, b_i their 128-bit
// lanes: FoldHalves gives (a0 + a2, a1 + a3, b0 + b2, b1 + b3), FoldQuarters
// (a0 + a1, a2 + a3, b0 + b1, b2 + b3); FoldInLanes does the same within every
// 128-bit lane, element by element (a0 + a1, a2 + a3, b0 + b1, b2 + b3).
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 FoldHalves(__m512 a, __m512 b) {
  return AddLanes16<Arch, T>(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 FoldQuarters(__m512 a, __m512 b) {
  return AddLanes16<Arch, T>(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 FoldInLanes(__m512 a, __m512 b) {
  return AddLanes16<Arch, T>(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Element 4 i + j to element 4 j + i: the 4 x 4 transposition of quarters.
template <class Arch>
__attribute__((always_inline)) inline __m512 TransposeQuarters(__m512 v) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, v);
}

// Four rows folded within the 128-bit lanes: element 4 g + i = the sum of
// rows[i]'s elements 4 g .. 4 g + 3.
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 FoldRowQuad(const __m512* rows) {
  return FoldInLanes<Arch, T>(FoldInLanes<Arch, T>(rows[0], rows[1]),
                              FoldInLanes<Arch, T>(rows[2], rows[3]));
}

// Four registers folded across the 128-bit lanes: element 4 q + i = the sum of
// elements i, 4 + i, 8 + i and 12 + i of quads[q].
template <class Arch, class T>
__attribute__((always_inline)) inline __m512 FoldQuads(const __m512* quads) {
  return FoldQuarters<Arch, T>(FoldHalves<Arch, T>(quads[0], quads[1]),
                               FoldHalves<Arch, T>(quads[2], quads[3]));
}

template <class Arch, class T>
__attribute__((always_inline)) inline __m512 TransposeAdd16(const xsimd::batch<T, Arch>* rows) {
  __m512 quads[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m512 quad[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        quad[i] = rows[4 * q + i];
      } else {
        quad[i] = _mm512_castsi512_ps(rows[4 * q + i]);
      }
    }
    quads[q] = FoldRowQuad<Arch, T>(quad);
  }
  return FoldQuads<Arch, T>(quads);
}

// The int32 sums of four rows within every 128-bit lane, as float: element 4 g
// + r = the sum of rows[r]'s elements 4 g .. 4 g + 3 (AVX-512 only). For int4
// K, whose 128-bit lane g holds one scale group (I16Dot::WidenI4Groups), this
// leaves one key's four rows per group, ready for one multiply by the group
// scales.
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> SumLaneQuadsI32(
    const xsimd::batch<std::int32_t, Arch>* rows) {
  const __m512 quad[4] = {_mm512_castsi512_ps(rows[0]), _mm512_castsi512_ps(rows[1]),
                          _mm512_castsi512_ps(rows[2]), _mm512_castsi512_ps(rows[3])};
  return _mm512_cvtepi32_ps(_mm512_castps_si512(FoldRowQuad<Arch, std::int32_t>(quad)));
}

// For four registers whose element 4 g + r holds a part of sum (r, j) (j the
// register): element 4 r + j = the sum of those four parts (AVX-512 only).
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> SumQuarterParts(
    const xsimd::batch<float, Arch>* parts) {
  const __m512 quads[4] = {parts[0], parts[1], parts[2], parts[3]};
  return TransposeQuarters<Arch>(FoldQuads<Arch, float>(quads));
}

// sums[i] = sum of rows[i]'s lanes, for N = lanes rows. xsimd 8.1's
// avx512f haddp puts rows 2-3 and 4-5 (and 10-11, 12-13) in each other's place,
// so 16 lanes use our own transpose-add: each quad of rows folds within the
// 128-bit lanes first (element 4 g + i: lane g's part of row 4 q + i), and two
// cross-lane folds of the four results leave row r at element r. Folding within
// the lanes first takes 6 cross-lane shuffles instead of 25, which compete
// with the multiply-adds (docs/attention_tuning.md, "int4 group sums folded in
// int32, nibbles by shifts, and what the integer steps wait on"). Forced
// inline: GCC left the AVX-512 instance out of line, which made every score
// tile store its 16 accumulators to memory for the call.
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> TransposeAdd(
    const xsimd::batch<float, Arch>* rows) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return xsimd::batch<float, Arch>(TransposeAdd16<Arch, float>(rows));
  } else {
    return xsimd::haddp(rows);
  }
}

// TransposeAdd over 16 int32 rows of 16 lanes, in integers: exact where the
// float one would round each partial sum (AVX-512 only).
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<std::int32_t, Arch> TransposeAddI32(
    const xsimd::batch<std::int32_t, Arch>* rows) {
  static_assert(xsimd::batch<std::int32_t, Arch>::size == 16, "16-lane batches only");
  return xsimd::batch<std::int32_t, Arch>(
      _mm512_castps_si512(TransposeAdd16<Arch, std::int32_t>(rows)));
}

// Transposes the square of lanes x lanes floats held in rows[0 .. lanes - 1]:
// row i lane c goes to row c lane i. The first two rounds work within each
// 128-bit lane (xsimd 8.1's zip_lo / zip_hi are the in-lane unpacks on x86):
// pairs of rows interleaved by floats, then by pairs of floats (as doubles),
// which leaves in row 4i + k, 128-bit lane L, column 4L + k of rows 4i .. 4i +
// 3. With 8 or 16 lanes a last round moves the 128-bit lanes across rows.
template <class Arch>
__attribute__((always_inline)) inline void Transpose(xsimd::batch<float, Arch>* rows) {
  using B = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  constexpr int kLanes = static_cast<int>(B::size);
  B t[static_cast<std::size_t>(kLanes)];
#pragma GCC unroll 8
  for (int i = 0; i < kLanes; i += 2) {
    t[i] = xsimd::zip_lo(rows[i], rows[i + 1]);
    t[i + 1] = xsimd::zip_hi(rows[i], rows[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < kLanes; i += 4) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const D a = xsimd::bitwise_cast<D>(t[i + h]);
      const D b = xsimd::bitwise_cast<D>(t[i + h + 2]);
      rows[i + 2 * h] = xsimd::bitwise_cast<B>(xsimd::zip_lo(a, b));
      rows[i + 2 * h + 1] = xsimd::bitwise_cast<B>(xsimd::zip_hi(a, b));
    }
  }
  if constexpr (kLanes == 16) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // Lanes 0 and 2 (even) or 1 and 3 (odd) of the row groups 0, 1 and 2, 3.
      const __m512 even01 = _mm512_shuffle_f32x4(rows[k], rows[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512 odd01 = _mm512_shuffle_f32x4(rows[k], rows[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
      const __m512 even23 =
          _mm512_shuffle_f32x4(rows[8 + k], rows[12 + k], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512 odd23 = _mm512_shuffle_f32x4(rows[8 + k], rows[12 + k], _MM_SHUFFLE(3, 1, 3, 1));
      rows[k] = _mm512_shuffle_f32x4(even01, even23, _MM_SHUFFLE(2, 0, 2, 0));
      rows[8 + k] = _mm512_shuffle_f32x4(even01, even23, _MM_SHUFFLE(3, 1, 3, 1));
      rows[4 + k] = _mm512_shuffle_f32x4(odd01, odd23, _MM_SHUFFLE(2, 0, 2, 0));
      rows[12 + k] = _mm512_shuffle_f32x4(odd01, odd23, _MM_SHUFFLE(3, 1, 3, 1));
    }
  } else if constexpr (kLanes == 8) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256 low = _mm256_permute2f128_ps(rows[k], rows[4 + k], 0x20);
      rows[4 + k] = _mm256_permute2f128_ps(rows[k], rows[4 + k], 0x31);
      rows[k] = low;
    }
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
  }
}

// Stores quarter i of the 16 lanes of v (lanes 4i .. 4i + 3) at dst + i *
// stride, times scale[i] when scale is not null: a 4 x 4 score tile's sums,
// straight from the register. Storing v whole and copying the quarters out
// made every tile wait: a 64-byte store does not forward to the 16-byte loads
// that read it back, so they wait until it reaches L1.
template <class Arch>
__attribute__((always_inline)) inline void StoreQuarters(const xsimd::batch<float, Arch>& v,
                                                         float* dst, std::int64_t stride,
                                                         const float* scale) {
  static_assert(xsimd::batch<float, Arch>::size == 16, "16-lane batches only");
  const __m512 x = v;
  const __m128 q[4] = {_mm512_extractf32x4_ps(x, 0), _mm512_extractf32x4_ps(x, 1),
                       _mm512_extractf32x4_ps(x, 2), _mm512_extractf32x4_ps(x, 3)};
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_ps(dst + i * stride,
                  scale != nullptr ? _mm_mul_ps(q[i], _mm_set1_ps(scale[i])) : q[i]);
  }
}

// Zero-extends xsimd::batch<std::uint32_t, Arch>::size 16-bit values (vpmovzxwd).
template <class Arch>
xsimd::batch<std::uint32_t, Arch> LoadWidenU16(const std::uint16_t* p) {
  constexpr std::size_t kLanes = xsimd::batch<std::uint32_t, Arch>::size;
  if constexpr (kLanes == 16) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (kLanes == 8) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
    return _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
}

// Stores the low 16 bits of each lane; every lane must be <= 0xFFFF (the packs
// saturate as signed 32 -> unsigned 16, exact in that range).
template <class Arch>
void StoreNarrowU16(const xsimd::batch<std::uint32_t, Arch>& v, std::uint16_t* p) {
  constexpr std::size_t kLanes = xsimd::batch<std::uint32_t, Arch>::size;
  if constexpr (kLanes == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  } else if constexpr (kLanes == 8) {
    // packus works per 128-bit lane: [v0..3 v0..3 | v4..7 v4..7]; gather qwords 0 and 2.
    const __m256i packed = _mm256_packus_epi32(v, v);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(ordered));
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(v, v));
  }
}

// Sign-extends xsimd::batch<float, Arch>::size int8 values to int32 lanes (vpmovsxbd).
template <class Arch>
xsimd::batch<std::int32_t, Arch> LoadWidenI8(const std::uint8_t* p) {
  constexpr std::size_t kLanes = xsimd::batch<std::int32_t, Arch>::size;
  if constexpr (kLanes == 16) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (kLanes == 8) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
    std::int32_t word;
    __builtin_memcpy(&word, p, sizeof word);
    return _mm_cvtepi8_epi32(_mm_cvtsi32_si128(word));
  }
}

// Stores the low byte of each lane; every lane must be in [-128, 127] (the packs
// saturate, exact in that range).
template <class Arch>
void StoreNarrowI8(const xsimd::batch<std::int32_t, Arch>& v, std::uint8_t* p) {
  constexpr std::size_t kLanes = xsimd::batch<std::int32_t, Arch>::size;
  if constexpr (kLanes == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
  } else if constexpr (kLanes == 8) {
    // The packs work per 128-bit lane: bytes 0-3 of each lane hold v0..3 and v4..7.
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
    const __m128i joined =
        _mm_unpacklo_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), joined);
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
    const __m128i w = _mm_packs_epi16(_mm_packs_epi32(v, v), _mm_setzero_si128());
    const std::int32_t word = _mm_cvtsi128_si32(w);
    __builtin_memcpy(p, &word, sizeof word);
  }
}

// Lane i = the f32 at base + i * stride bytes, any alignment: four scalar
// loads inserted into each 128-bit lane. Not vgatherdps: on Zen 4 a gather is
// microcoded and stalls the front end (docs/attention_tuning.md, "Scales
// without gathers").
__attribute__((always_inline)) inline __m128 LoadF32Bytes(const std::uint8_t* p) {
  float f;
  __builtin_memcpy(&f, p, sizeof f);
  return _mm_set_ss(f);
}
__attribute__((always_inline)) inline __m128 StridedQuad(const std::uint8_t* base,
                                                         std::int64_t stride) {
  __m128 q = LoadF32Bytes(base);
  q = _mm_insert_ps(q, LoadF32Bytes(base + stride), 0x10);
  q = _mm_insert_ps(q, LoadF32Bytes(base + 2 * stride), 0x20);
  return _mm_insert_ps(q, LoadF32Bytes(base + 3 * stride), 0x30);
}
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> StridedF32(const std::uint8_t* base,
                                                                           std::int64_t stride) {
  constexpr std::size_t kLanes = xsimd::batch<float, Arch>::size;
  if constexpr (kLanes == 16) {
    const __m256 lo =
        _mm256_set_m128(StridedQuad(base + 4 * stride, stride), StridedQuad(base, stride));
    const __m256 hi = _mm256_set_m128(StridedQuad(base + 12 * stride, stride),
                                      StridedQuad(base + 8 * stride, stride));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  } else if constexpr (kLanes == 8) {
    return _mm256_set_m128(StridedQuad(base + 4 * stride, stride), StridedQuad(base, stride));
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
    return StridedQuad(base, stride);
  }
}

// out[g] lane i = the f32 at base + i * stride + 4 g bytes, for g < 4: four
// consecutive floats of each of kLanes rows, any alignment, as one batch per
// column. Each row's four are one 16-byte load; the transposition takes a few
// shuffles where StridedF32 per column would take a load and an insert per lane
// (4 lanes: the square Transpose).
template <class Arch>
__attribute__((always_inline)) inline void StridedF32Quads(const std::uint8_t* base,
                                                           std::int64_t stride,
                                                           xsimd::batch<float, Arch>* out) {
  constexpr std::size_t kLanes = xsimd::batch<float, Arch>::size;
  const auto row = [&](std::int64_t i) {
    return _mm_loadu_ps(reinterpret_cast<const float*>(base + i * stride));
  };
  if constexpr (kLanes == 16) {
    // q[m] element 4 k + g: row 4 m + k, column g.
    __m512 q[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m256 lo = _mm256_set_m128(row(4 * m + 1), row(4 * m));
      const __m256 hi = _mm256_set_m128(row(4 * m + 3), row(4 * m + 2));
      q[m] = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    }
    // Columns 0 and 1 (or 2 and 3) of rows 0-7 (q[0], q[1]) or 8-15 (q[2], q[3]).
    const __m512i cols01 =
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i cols23 =
        _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512 lo01 = _mm512_permutex2var_ps(q[0], cols01, q[1]);
    const __m512 lo23 = _mm512_permutex2var_ps(q[0], cols23, q[1]);
    const __m512 hi01 = _mm512_permutex2var_ps(q[2], cols01, q[3]);
    const __m512 hi23 = _mm512_permutex2var_ps(q[2], cols23, q[3]);
    out[0] = _mm512_shuffle_f32x4(lo01, hi01, _MM_SHUFFLE(1, 0, 1, 0));
    out[1] = _mm512_shuffle_f32x4(lo01, hi01, _MM_SHUFFLE(3, 2, 3, 2));
    out[2] = _mm512_shuffle_f32x4(lo23, hi23, _MM_SHUFFLE(1, 0, 1, 0));
    out[3] = _mm512_shuffle_f32x4(lo23, hi23, _MM_SHUFFLE(3, 2, 3, 2));
  } else if constexpr (kLanes == 8) {
    // An in-lane 4 x 4 transposition of rows (0, 1), (2, 3), (4, 5), (6, 7)
    // leaves column g as rows 0 2 4 6 | 1 3 5 7; one permute each restores the order.
    const __m256 a = _mm256_set_m128(row(1), row(0));
    const __m256 b = _mm256_set_m128(row(3), row(2));
    const __m256 c = _mm256_set_m128(row(5), row(4));
    const __m256 d = _mm256_set_m128(row(7), row(6));
    const __m256 ab_lo = _mm256_unpacklo_ps(a, b);
    const __m256 ab_hi = _mm256_unpackhi_ps(a, b);
    const __m256 cd_lo = _mm256_unpacklo_ps(c, d);
    const __m256 cd_hi = _mm256_unpackhi_ps(c, d);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const auto low_pairs = [](__m256 x, __m256 y) {
      return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
    };
    const auto high_pairs = [](__m256 x, __m256 y) {
      return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
    };
    out[0] = _mm256_permutevar8x32_ps(low_pairs(ab_lo, cd_lo), order);
    out[1] = _mm256_permutevar8x32_ps(high_pairs(ab_lo, cd_lo), order);
    out[2] = _mm256_permutevar8x32_ps(low_pairs(ab_hi, cd_hi), order);
    out[3] = _mm256_permutevar8x32_ps(high_pairs(ab_hi, cd_hi), order);
  } else {
    static_assert(kLanes == 4, "unsupported batch width");
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) out[i] = row(i);
    Transpose<Arch>(out);
  }
}

// int16 multiply-add (pmaddwd) for the integer decode path of the quantized
// attend kernel (attend_quant-inl.h). A register of batch<int32_t, Arch> holds kLanes
// int16 values or kLanes / 2 int32 ones; each pmaddwd multiplies kLanes int16
// pairs and adds neighbours into int32 lanes, twice the multiply-adds of an f32
// FMA on the same port.
template <class Arch>
struct I16Dot {
  using I = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::int64_t kLanes = 2 * static_cast<std::int64_t>(I::size);

  // kLanes int8 values widened to int16 (vpmovsxbw); reads kLanes bytes.
  __attribute__((always_inline)) static I WidenI8(const std::uint8_t* p) {
    if constexpr (I::size == 16) {
      return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else if constexpr (I::size == 8) {
      return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      return _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
  }

  // The 2 kLanes int4 values of kLanes bytes (two's complement nibbles, low
  // first) widened to int16: even gets values 0, 2, 4, ..., odd 1, 3, 5, ....
  __attribute__((always_inline)) static void WidenI4(const std::uint8_t* p, I& even, I& odd) {
    SplitNibbles(WidenI8(p), even, odd);
  }

  // The two int4 values of each byte widened with its sign (w): a widened byte
  // is 16 odd + (even & 15), so an arithmetic shift by 4 leaves odd, and moving
  // the low nibble to the top and back leaves even.
  __attribute__((always_inline)) static void SplitNibbles(const I& w, I& even, I& odd) {
    if constexpr (I::size == 16) {
      even = _mm512_srai_epi16(_mm512_slli_epi16(w, 12), 12);
      odd = _mm512_srai_epi16(w, 4);
    } else if constexpr (I::size == 8) {
      even = _mm256_srai_epi16(_mm256_slli_epi16(w, 12), 12);
      odd = _mm256_srai_epi16(w, 4);
    } else {
      even = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
      odd = _mm_srai_epi16(w, 4);
    }
  }

  // AVX-512 only: the 128 int4 values of 64 bytes, four scale groups of 32,
  // widened to int16 so that Madd's int32 lane i sums values of group i / 4
  // only: nibbles[n] lane k holds value 4 k + n, the nibble n of the 16-bit word
  // k, moved to the top and shifted back with its sign. Shifts within lanes
  // only: no cross-lane widening, which competes with vpdpwssd on Zen 4.
  __attribute__((always_inline)) static void WidenI4Groups(const std::uint8_t* p, I* nibbles) {
    static_assert(I::size == 16, "AVX-512 only");
    const __m512i words = _mm512_loadu_si512(p);
    nibbles[0] = _mm512_srai_epi16(_mm512_slli_epi16(words, 12), 12);
    nibbles[1] = _mm512_srai_epi16(_mm512_slli_epi16(words, 8), 12);
    nibbles[2] = _mm512_srai_epi16(_mm512_slli_epi16(words, 4), 12);
    nibbles[3] = _mm512_srai_epi16(words, 12);
  }

  // AVX-512 only: the four f32 scales at p (any alignment), lane i = scale i / 4:
  // the scales of WidenI4Groups' groups, lane by lane as Madd leaves its sums.
  __attribute__((always_inline)) static xsimd::batch<float, Arch> GroupScales(
      const std::uint8_t* p) {
    static_assert(I::size == 16, "AVX-512 only");
    const __m512 four = _mm512_broadcast_f32x4(_mm_loadu_ps(reinterpret_cast<const float*>(p)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 four);
  }

  // kLanes int16 values.
  __attribute__((always_inline)) static I Load(const std::int16_t* p) {
    return I::load_unaligned(reinterpret_cast<const std::int32_t*>(p));
  }

  // Every int32 lane = the pair (lo, hi) of int16 values at p (lo first).
  __attribute__((always_inline)) static I BroadcastPair(const std::int16_t* p) {
    std::int32_t pair;
    __builtin_memcpy(&pair, p, sizeof pair);
    return I(pair);
  }

  // int32 lane i = a[2i] * b[2i] + a[2i + 1] * b[2i + 1].
  __attribute__((always_inline)) static I Madd(const I& a, const I& b) {
    if constexpr (I::size == 16) {
      return _mm512_madd_epi16(a, b);
    } else if constexpr (I::size == 8) {
      return _mm256_madd_epi16(a, b);
    } else {
      return _mm_madd_epi16(a, b);
    }
  }

  // acc + Madd(a, b). In the AVX-512 tier's VNNI unit (isa_avx512_vnni.cc, built
  // with -mavx512vnni) one vpdpwssd does both: the same int32 sums, wrapping alike.
  __attribute__((always_inline)) static I MaddAdd(const I& acc, const I& a, const I& b) {
#ifdef __AVX512VNNI__
    if constexpr (I::size == 16) return _mm512_dpwssd_epi32(acc, a, b);
#endif
    return acc + Madd(a, b);
  }

  // acc = MaddAdd(acc, a, b) with the sum kept in acc's register. With the
  // intrinsic in the value sums, GCC gave each vpdpwssd a fresh register and
  // copied it back (two moves per multiply-add) and spilled accumulators.
  __attribute__((always_inline)) static void MaddAddInPlace(I& acc, const I& a, const I& b) {
#ifdef __AVX512VNNI__
    if constexpr (I::size == 16) {
      __m512i sum = acc;
      const __m512i x = a;
      const __m512i y = b;
      asm("vpdpwssd %2, %1, %0" : "+v"(sum) : "v"(x), "v"(y));
      acc = sum;
      return;
    }
#endif
    acc = MaddAdd(acc, a, b);
  }

  // The int16 values of a and b interleaved (a0 b0 a1 b1 ...), per 128-bit lane:
  // Lo takes each lane's first four values, Hi its last four.
  __attribute__((always_inline)) static I InterleaveLo(const I& a, const I& b) {
    if constexpr (I::size == 16) {
      return _mm512_unpacklo_epi16(a, b);
    } else if constexpr (I::size == 8) {
      return _mm256_unpacklo_epi16(a, b);
    } else {
      return _mm_unpacklo_epi16(a, b);
    }
  }
  __attribute__((always_inline)) static I InterleaveHi(const I& a, const I& b) {
    if constexpr (I::size == 16) {
      return _mm512_unpackhi_epi16(a, b);
    } else if constexpr (I::size == 8) {
      return _mm256_unpackhi_epi16(a, b);
    } else {
      return _mm_unpackhi_epi16(a, b);
    }
  }

  // lo and hi are per-value sums over InterleaveLo and InterleaveHi pairs: puts
  // values 0 .. kLanes / 2 - 1 in lo and the rest in hi.
  __attribute__((always_inline)) static void InOrder(I& lo, I& hi) {
    if constexpr (I::size == 16) {
      const __m512i a = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
      const __m512i b = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
      lo = _mm512_shuffle_i32x4(a, a, _MM_SHUFFLE(3, 1, 2, 0));
      hi = _mm512_shuffle_i32x4(b, b, _MM_SHUFFLE(3, 1, 2, 0));
    } else if constexpr (I::size == 8) {
      const __m256i a = _mm256_permute2x128_si256(lo, hi, 0x20);
      const __m256i b = _mm256_permute2x128_si256(lo, hi, 0x31);
      lo = a;
      hi = b;
    }
  }

  // The int32 lanes of a, then those of b, as kLanes int16 values (saturating).
  __attribute__((always_inline)) static I Narrow(const I& a, const I& b) {
    if constexpr (I::size == 16) {
      const __m512i packed = _mm512_packs_epi32(a, b);
      return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), packed);
    } else if constexpr (I::size == 8) {
      return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
    } else {
      return _mm_packs_epi32(a, b);
    }
  }
};

// bf16 pair dot products (vdpbf16ps) for the scores of bf16 decode tiles
// (attend-inl.h). Only the AVX-512 tier's BF16 unit (isa_avx512_bf16.cc) is
// built with -mavx512bf16; everywhere else kBf16Dot is false and bf16 K is
// widened to f32 for FMAs.
#ifdef __AVX512BF16__
template <class Arch>
constexpr bool kBf16Dot = std::is_base_of_v<xsimd::avx512f, Arch>;

template <class Arch>
struct Bf16Dot {
  using B = xsimd::batch<float, Arch>;
  using Bits = __m512i;                       // 32 bf16 values, or 16 pairs
  static constexpr std::int64_t kLanes = 32;  // bf16 values per register

  // src[0, 32) rounded to bf16 into dst[0, 32): nearest even, subnormals to
  // zero, NaN quiet (vcvtne2ps2bf16).
  __attribute__((always_inline)) static void Round(const float* src, std::uint16_t* dst) {
    const __m512 lo = _mm512_loadu_ps(src);
    const __m512 hi = _mm512_loadu_ps(src + 16);
    _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }

  // dst[i] = (src[i] rounded to bf16 as Round rounds it) * scale in f32, i < n;
  // dst may be src.
  static void RoundAndScale(const float* src, float scale, float* dst, std::int64_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    for (std::int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = LaneMask(n - c);
      const __m256i b =
          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + c)));
      const __m512 rounded = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
      _mm512_mask_storeu_ps(dst + c, m, _mm512_mul_ps(rounded, s));
    }
  }

  __attribute__((always_inline)) static __m512i Load(const std::uint16_t* p) {
    return _mm512_loadu_si512(p);
  }

  // acc lane i + a[2i] * b[2i] + a[2i + 1] * b[2i + 1], the products exact and
  // summed in f32; bf16 subnormals count as zero.
  __attribute__((always_inline)) static B DotAdd(const B& acc, const __m512i& a, const __m512i& b) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  }

  // The V step pairs keys, not dimensions: a 32-bit lane holds one value of
  // V[j] and the same value of V[j + 1], and the weights (p[j], p[j + 1]) are
  // one 32-bit word broadcast. p[0, n) rounded as Round rounds, packed in
  // place: word k of p becomes bf16(p[2k]) | bf16(p[2k + 1]) << 16, 0 for a
  // p[n] past an odd n. Each 32-value chunk is read before its 16 words are
  // written, which only overwrite floats read already; p holds >= 16 floats.
  static void PackPairs(float* p, std::int64_t n) {
    for (std::int64_t c = 0; c < n; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(LaneMask(n - c), p + c);
      const __m512 hi = _mm512_maskz_loadu_ps(LaneMask(n - c - 16), p + c + 16);
      _mm512_storeu_si512(p + c / 2, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }

  __attribute__((always_inline)) static __m512i Zero() { return _mm512_setzero_si512(); }

  __attribute__((always_inline)) static __m512i BroadcastPair(std::uint32_t pair) {
    return _mm512_set1_epi32(static_cast<int>(pair));
  }

  // Keys a and b's 32 values of one V chunk as pairs, interleaved within each
  // 128-bit lane: lane 4q + i of lo holds value 8q + i of both, lane 4q + i of
  // hi value 8q + 4 + i (q, i < 4). The f32 accumulators of the chunk are kept
  // in that order while the pairs are added (ToPairOrder).
  __attribute__((always_inline)) static void Interleave(const __m512i& a, const __m512i& b,
                                                        __m512i& lo, __m512i& hi) {
    lo = _mm512_unpacklo_epi16(a, b);
    hi = _mm512_unpackhi_epi16(a, b);
  }

  // 32 f32 accumulators of a chunk, in value order as n0, n1, to the order of
  // Interleave's lanes, and back.
  __attribute__((always_inline)) static void ToPairOrder(const B& n0, const B& n1, B& lo, B& hi) {
    const __m512i to_lo =
        _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i to_hi =
        _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    lo = _mm512_permutex2var_ps(n0, to_lo, n1);
    hi = _mm512_permutex2var_ps(n0, to_hi, n1);
  }
  __attribute__((always_inline)) static void FromPairOrder(const B& lo, const B& hi, B& n0, B& n1) {
    const __m512i to_n0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i to_n1 =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    n0 = _mm512_permutex2var_ps(lo, to_n0, hi);
    n1 = _mm512_permutex2var_ps(lo, to_n1, hi);
  }

 private:
  // The first count (clamped to [0, 16]) lanes.
  __attribute__((always_inline)) static __mmask16 LaneMask(std::int64_t count) {
    if (count >= 16) return 0xFFFFu;
    return count <= 0 ? __mmask16{0} : static_cast<__mmask16>((1u << count) - 1u);
  }
};
#else
template <class Arch>
constexpr bool kBf16Dot = false;
template <class Arch>
struct Bf16Dot;
#endif

}  // namespace
}  // namespace ringkv::kernels
