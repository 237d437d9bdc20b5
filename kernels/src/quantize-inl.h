#pragma once
// Quantized K/V rows (layout in ringkv/kernels/dtype.h) in batches: the max|x|
// reduction, x * (1 / s), round half to even and the narrowing store to int8;
// int8 and int4 widened back to f32 lanes. The arithmetic is quantize_row.h's,
// batch by batch (max is exact in any order, x * inv is one IEEE multiply), so
// every tier writes the bytes the scalar tier writes.
#include <cstddef>
#include <cstdint>

#include "quantize_row.h"
#include "simd_compat-inl.h"

namespace ringkv::kernels {
namespace {

// int8 row values [c, c + size) as f32 (not yet scaled).
template <class Arch>
__attribute__((always_inline)) inline FloatBatch<Arch> LoadI8AsFloat(const std::uint8_t* p) {
  return xsimd::batch_cast<float>(LoadWidenI8<Arch>(p));
}

// The 2 * size int4 values held by `size` bytes at p, times `scale`: `even` gets
// values 0, 2, 4, ... (the low nibbles), `odd` values 1, 3, 5, ... (the high
// ones). The sign-extended byte is 16 odd + (even & 15), so `<< 28` leaves
// even * 2^28 and clearing the low nibble leaves odd * 16, both exact in f32;
// the powers of two go into the scale (exact unless it is below 2^-98).
template <class Arch>
__attribute__((always_inline)) inline void LoadI4Scaled(const std::uint8_t* p, float scale,
                                                        FloatBatch<Arch>& even,
                                                        FloatBatch<Arch>& odd) {
  using B = FloatBatch<Arch>;
  const I32Batch<Arch> bytes = LoadWidenI8<Arch>(p);
  even = xsimd::batch_cast<float>(bytes << 28) * B(scale * 0x1p-28f);
  odd = xsimd::batch_cast<float>(bytes & I32Batch<Arch>(~0xF)) * B(scale * 0x1p-4f);
}

// |x| (clears the sign bit).
template <class Arch>
FloatBatch<Arch> AbsBits(const FloatBatch<Arch>& x) {
  return BitCast<float>(BitCast<std::uint32_t>(x) & U32Batch<Arch>(0x7FFFFFFFu));
}

// max |x| over n values at x (n a multiple of the batch size), and whether
// all of them are finite.
template <class Arch, class Tag>
void AbsMaxOfBatches(const typename Tag::Stored* x, std::size_t n, float& amax, bool& finite) {
  using B = FloatBatch<Arch>;
  constexpr std::size_t kN = B::size;
  B m(0.0f);
  auto ok = m == m;  // all true
  for (std::size_t c = 0; c < n; c += kN) {
    const B a = AbsBits<Arch>(LoadAsFloat<Arch, Tag>(x + c));
    ok = ok & (a <= B(kQuantFloatMax));  // false for NaN too
    m = xsimd::select(a > m, a, m);
  }
  amax = ReduceMax<Arch>(m);
  finite = xsimd::all(ok);
}

// q = clamp(round(x * inv)) for one batch, as int32 lanes. Forced inline: GCC
// called the NEON instance once per batch, in the quantizing loops and in the
// integer decode's rounding of each block's weights.
template <class Arch>
__attribute__((always_inline)) inline I32Batch<Arch> QuantizeBatch(const FloatBatch<Arch>& x,
                                                                   float inv, float qmax) {
  using B = FloatBatch<Arch>;
  const B y = xsimd::nearbyint(x * B(inv));
  const B clamped = xsimd::select(y < B(-qmax), B(-qmax), xsimd::select(y > B(qmax), B(qmax), y));
  return xsimd::batch_cast<std::int32_t>(clamped);
}

template <class Tag>
struct ScalarLoader {
  const typename Tag::Stored* x;
  float operator()(std::size_t i) const { return ScalarToFloat<Tag>(x[i]); }
};

// One row of n values of Tag at x -> RowBytes(kI8, n) bytes at out.
template <class Arch, class Tag>
void QuantizeI8Row(const typename Tag::Stored* x, std::size_t n, std::uint8_t* out) {
  constexpr std::size_t kN = FloatBatch<Arch>::size;
  const std::size_t n_vec = n - n % kN;
  const ScalarLoader<Tag> load{x};
  float amax = 0.0f;
  bool finite = true;
  AbsMaxOfBatches<Arch, Tag>(x, n_vec, amax, finite);
  for (std::size_t c = n_vec; c < n; ++c) {
    const float a = QuantAbs(load(c));
    finite = finite && a <= kQuantFloatMax;
    amax = a > amax ? a : amax;
  }
  const QuantScale sc = QuantScaleFor(amax, finite, kQuantI8Max);
  if (sc.divide) {  // denormal scale: rare, scalar
    QuantizeI8RowScalar(load, n, out);
    return;
  }
  if (!(sc.s > 0.0f)) {  // all zero, or NaN / Inf in the row: q = 0
    for (std::size_t c = 0; c < n; ++c) out[c] = 0;
  } else {
    for (std::size_t c = 0; c < n_vec; c += kN) {
      StoreNarrowI8<Arch>(QuantizeBatch<Arch>(LoadAsFloat<Arch, Tag>(x + c), sc.inv, kQuantI8Max),
                          out + c);
    }
    for (std::size_t c = n_vec; c < n; ++c) {
      out[c] = static_cast<std::uint8_t>(
          static_cast<std::int8_t>(QuantizeValue(load(c), sc, kQuantI8Max)));
    }
  }
  StoreQuantScale(sc.s, out + n);
}

// One row of n values (n % kI4Group == 0) -> RowBytes(kI4, n) bytes at out.
template <class Arch, class Tag>
void QuantizeI4Row(const typename Tag::Stored* x, std::size_t n, std::uint8_t* out) {
  constexpr std::size_t kN = FloatBatch<Arch>::size;
  constexpr auto kGroup = static_cast<std::size_t>(kI4Group);
  static_assert(kGroup % kN == 0);
  const ScalarLoader<Tag> load{x};
  for (std::size_t g = 0; g < n / kGroup; ++g) {
    const typename Tag::Stored* xg = x + g * kGroup;
    float amax = 0.0f;
    bool finite = true;
    AbsMaxOfBatches<Arch, Tag>(xg, kGroup, amax, finite);
    const QuantScale sc = QuantScaleFor(amax, finite, kQuantI4Max);
    if (sc.divide || !(sc.s > 0.0f)) {  // denormal, zero or NaN scale: rare, scalar
      QuantizeI4GroupScalar(load, n, g, kGroup, out);
      continue;
    }
    alignas(64) std::uint8_t q[kGroup];
    for (std::size_t c = 0; c < kGroup; c += kN) {
      StoreNarrowI8<Arch>(QuantizeBatch<Arch>(LoadAsFloat<Arch, Tag>(xg + c), sc.inv, kQuantI4Max),
                          q + c);
    }
    for (std::size_t i = 0; i < kGroup; i += 2) {
      out[(g * kGroup + i) / 2] =
          I4Pack(static_cast<std::int8_t>(q[i]), static_cast<std::int8_t>(q[i + 1]));
    }
    StoreQuantScale(sc.s, out + n / 2 + g * 4);
  }
}

// RowBytes(kI8, n) bytes at row -> n values of Tag at out: x_i = s * q_i.
template <class Arch, class Tag>
void DequantizeI8Row(const std::uint8_t* row, std::size_t n, typename Tag::Stored* out) {
  using B = FloatBatch<Arch>;
  constexpr std::size_t kN = B::size;
  const float s = LoadQuantScale(row + n);
  std::size_t c = 0;
  for (; c + kN <= n; c += kN) {
    StoreFromFloat<Arch, Tag>(LoadI8AsFloat<Arch>(row + c) * B(s), out + c);
  }
  for (; c < n; ++c) {
    out[c] = ScalarFromFloat<Tag>(s * static_cast<float>(static_cast<std::int8_t>(row[c])));
  }
}

// RowBytes(kI4, n) bytes at row -> n values of Tag at out: x_i = s_g * q_i.
template <class Arch, class Tag>
void DequantizeI4Row(const std::uint8_t* row, std::size_t n, typename Tag::Stored* out) {
  using B = FloatBatch<Arch>;
  constexpr std::size_t kN = B::size;
  constexpr auto kGroup = static_cast<std::size_t>(kI4Group);
  for (std::size_t g = 0; g < n / kGroup; ++g) {
    const B s(LoadQuantScale(row + n / 2 + g * 4));
    alignas(64) std::uint8_t q[kGroup];
    for (std::size_t i = 0; i < kGroup; ++i) {
      q[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(I4Value(row, g * kGroup + i)));
    }
    for (std::size_t c = 0; c < kGroup; c += kN) {
      StoreFromFloat<Arch, Tag>(LoadI8AsFloat<Arch>(q + c) * s, out + g * kGroup + c);
    }
  }
}

}  // namespace
}  // namespace ringkv::kernels
