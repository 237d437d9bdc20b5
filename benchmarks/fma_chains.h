#pragma once
// The f32 multiply-add loop of each kernel tier, the loop roofline.cc times for
// that tier's compute peak. Each is compiled in a unit of its own with only its
// tier's flags (fma_chains_<tier>.cc, built by ringkv_add_isa_kernels) and has
// no inline helpers that could leak across tiers (tools/check_isa_linkage.sh
// explains the rule): the benchmark binary stays baseline x86-64.
#include <cstddef>

namespace ringkv::bench {

// Each runs `iterations` steps of independent multiply-add chains seeded from
// `seed` and returns a value that depends on all of them (so none is dropped).
// A step is kFmaFlopsPerStep<tier> flops.

// Scalar tier: 12 chains of one f32 lane, mulss + addss (baseline x86-64 has no FMA;
// the unit is built without auto-vectorisation, so the loop stays scalar).
float FmaChainsScalar(std::size_t iterations, float seed) noexcept;
inline constexpr double kFmaFlopsPerStepScalar = 2.0 * 1 * 12;

// SSE4.2 tier: 12 chains of 128-bit mulps + addps (the tier has no FMA).
float FmaChainsSse42(std::size_t iterations, float seed) noexcept;
inline constexpr double kFmaFlopsPerStepSse42 = 2.0 * 4 * 12;

// AVX2 tier: 12 chains of 256-bit vfmadd.
float FmaChainsAvx2(std::size_t iterations, float seed) noexcept;
inline constexpr double kFmaFlopsPerStepAvx2 = 2.0 * 8 * 12;

// The AVX2 tier's int16 multiply-add as the integer decode uses it (attend_quant-inl.h):
// 12 chains of 256-bit vpmaddwd then vpaddd into the chain, 16 multiply-adds per
// pair; returns the sum as a float. A step is kMaddMacsPerStepAvx2 multiply-adds,
// to be set against kFmaFlopsPerStepAvx2 / 2 (an FMA is 8 of them, 2 flops each).
float MaddChainsAvx2(std::size_t iterations, float seed) noexcept;
inline constexpr double kMaddMacsPerStepAvx2 = 16.0 * 12;

// AVX-512 tier: 16 chains of 512-bit vfmadd (only built with RINGKV_ENABLE_AVX512).
float FmaChainsAvx512(std::size_t iterations, float seed) noexcept;
inline constexpr double kFmaFlopsPerStepAvx512 = 2.0 * 16 * 16;

}  // namespace ringkv::bench
