#pragma once
// The xsimd arch of an AVX-512 unit built with instructions beyond the tier's
// (isa_avx512_vnni.cc, isa_avx512_bf16.cc): avx512bw's registers and kernels
// under a type of that translation unit alone. Instantiated on
// xsimd::avx512bw itself, the xsimd templates such a unit emits out of line
// (Debug and sanitizer builds do) would be weak symbols under the same names as
// the plain AVX-512 unit's, and the linker could keep the extended copies for
// CPUs without the extension. A type declared in an anonymous namespace has
// internal linkage, and so has every instance on it.
#include <xsimd/xsimd.hpp>

namespace ringkv::kernels {
namespace {
// Label: a type with `static constexpr const char* kName`, one per unit.
template <class Label>
struct Avx512Extension : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return Label::kName; }
};
}  // namespace
}  // namespace ringkv::kernels

namespace xsimd::types {
template <class T, class Label>
struct get_bool_simd_register<T, ringkv::kernels::Avx512Extension<Label>> {
  using type = simd_avx512_bool_register<T>;
};
// What XSIMD_DECLARE_SIMD_REGISTER_ALIAS(Avx512Extension<Label>, avx512bw)
// would declare, for every label.
template <class T, class Label>
struct simd_register<T, ringkv::kernels::Avx512Extension<Label>> : simd_register<T, avx512bw> {
  using register_type = typename simd_register<T, avx512bw>::register_type;
  simd_register(register_type reg) noexcept : simd_register<T, avx512bw>{reg} {}
  simd_register() = default;
};
template <class T, class Label>
struct has_simd_register<T, ringkv::kernels::Avx512Extension<Label>>
    : has_simd_register<T, avx512bw> {};
}  // namespace xsimd::types
