#pragma once
// The arithmetic of quantized K/V rows (layout in ringkv/kernels/dtype.h), one
// value at a time: the scalar tier uses it for whole rows, the xsimd tiers for
// what their batches leave (rows of denormal scale), so every tier writes the
// same bytes. Symmetric: s = max|x| / qmax (qmax 127 for kI8, 7 for kI4),
// q = clamp(round_half_even(x * (1 / s)), -qmax, qmax); a run holding NaN or Inf
// gets a NaN scale and q = 0; an all-zero run gets s = 0 and q = 0.
//
// Internal linkage (anonymous namespace) like the -inl.h bodies: the per-ISA
// units include this, and a shared inline function would be a weak symbol the
// linker could take from the AVX-512 object (docs/kernels.md, "linkage").
#include <cstddef>
#include <cstdint>

namespace ringkv::kernels {
namespace {

constexpr float kQuantI8Max = 127.0f;
constexpr float kQuantI4Max = 7.0f;
constexpr float kQuantFloatMax = 3.40282347e38f;

struct QuantScale {
  float s = 0.0f;    // the stored scale
  float inv = 0.0f;  // 1 / s; 0 for s = 0 or NaN
  // 1 / s overflows when s is denormal: such runs divide by s instead.
  bool divide = false;
};

// amax = max |x| over the run; finite = no NaN or Inf in the run.
inline QuantScale QuantScaleFor(float amax, bool finite, float qmax) {
  QuantScale q;
  if (!finite) {
    q.s = __builtin_nanf("");
    return q;
  }
  q.s = amax / qmax;
  if (q.s > 0.0f) {
    q.inv = 1.0f / q.s;
    q.divide = !(q.inv <= kQuantFloatMax);
  }
  return q;
}

// Half to even in the default rounding mode, as the batches' vroundps. Not the
// 1.5 * 2^23 add-and-subtract trick: with -mfma GCC contracts x * inv + 1.5 * 2^23
// into one FMA, which skips the rounding of the product, so tiers would differ.
inline float QuantRound(float y) { return __builtin_nearbyintf(y); }

inline float QuantClamp(float y, float qmax) { return y < -qmax ? -qmax : y > qmax ? qmax : y; }

// q for one value x of a run with scale `sc` (0 for a NaN scale).
inline int QuantizeValue(float x, const QuantScale& sc, float qmax) {
  if (!(sc.s > 0.0f)) return 0;
  const float y = sc.divide ? x / sc.s : x * sc.inv;
  return static_cast<int>(QuantClamp(QuantRound(y), qmax));
}

inline float QuantAbs(float x) { return x < 0.0f ? -x : x; }

// Scale of the run x[0, n), reading x through `load(i) -> float`.
template <class Load>
QuantScale QuantScaleOfRun(const Load& load, std::size_t begin, std::size_t n, float qmax) {
  float amax = 0.0f;
  bool finite = true;
  for (std::size_t i = begin; i < begin + n; ++i) {
    const float a = QuantAbs(load(i));
    finite = finite && a <= kQuantFloatMax;  // false for NaN too
    amax = a > amax ? a : amax;
  }
  return QuantScaleFor(amax, finite, qmax);
}

inline void StoreQuantScale(float s, std::uint8_t* p) { __builtin_memcpy(p, &s, sizeof s); }

inline float LoadQuantScale(const std::uint8_t* p) {
  float s;
  __builtin_memcpy(&s, p, sizeof s);
  return s;
}

// Value i of an int4 row's data (two's complement nibbles, low nibble first).
inline int I4Value(const std::uint8_t* data, std::size_t i) {
  const unsigned byte = data[i / 2];
  const unsigned nibble = i % 2 == 0 ? byte & 0xFu : byte >> 4;
  return nibble >= 8 ? static_cast<int>(nibble) - 16 : static_cast<int>(nibble);
}

inline std::uint8_t I4Pack(int lo, int hi) {
  return static_cast<std::uint8_t>((static_cast<unsigned>(lo) & 0xFu) |
                                   ((static_cast<unsigned>(hi) & 0xFu) << 4));
}

// Quantizes row x[0, n) (read through `load`) into `out`, RowBytes(kI8, n) bytes.
template <class Load>
void QuantizeI8RowScalar(const Load& load, std::size_t n, std::uint8_t* out) {
  const QuantScale sc = QuantScaleOfRun(load, 0, n, kQuantI8Max);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint8_t>(
        static_cast<std::int8_t>(QuantizeValue(load(i), sc, kQuantI8Max)));
  }
  StoreQuantScale(sc.s, out + n);
}

// Quantizes group g (values [32 g, 32 g + 32)) of an int4 row of n values.
template <class Load>
void QuantizeI4GroupScalar(const Load& load, std::size_t n, std::size_t g, std::size_t group,
                           std::uint8_t* out) {
  const std::size_t begin = g * group;
  const QuantScale sc = QuantScaleOfRun(load, begin, group, kQuantI4Max);
  for (std::size_t i = begin; i < begin + group; i += 2) {
    out[i / 2] = I4Pack(QuantizeValue(load(i), sc, kQuantI4Max),
                        QuantizeValue(load(i + 1), sc, kQuantI4Max));
  }
  StoreQuantScale(sc.s, out + n / 2 + g * 4);
}

}  // namespace
}  // namespace ringkv::kernels
