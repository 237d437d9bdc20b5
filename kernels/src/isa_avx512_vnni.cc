// The AVX-512 tier's attend kernel once more, compiled with -mavx512vnni as well:
// the integer decode steps of int8 and int4 K/V add each int16 multiply-add into
// its accumulator in one vpdpwssd (I16Dot::MaddAdd) instead of vpmaddwd + vpaddd.
// kernel_table.cc puts it in the AVX-512 table on CPUs that have AVX512-VNNI.
// Exports only FillAvx512VnniAttend.
//
// Its own arch, in an anonymous namespace: instantiated on xsimd::avx512bw, the
// xsimd templates this unit emits out of line (Debug and sanitizer builds do)
// would be weak symbols under the same names as the AVX-512 unit's, and the
// linker could keep this unit's VNNI copies for CPUs without VNNI. On a type of
// internal linkage every instance is internal too.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "fill_kernels.h"

namespace ringkv::kernels {
namespace {
struct Avx512Vnni : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "avx512bw+vnni"; }
};
}  // namespace
}  // namespace ringkv::kernels

namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, ringkv::kernels::Avx512Vnni> {
  using type = simd_avx512_bool_register<T>;
};
XSIMD_DECLARE_SIMD_REGISTER_ALIAS(ringkv::kernels::Avx512Vnni, avx512bw);
}  // namespace xsimd::types

namespace ringkv::kernels {

void FillAvx512VnniAttend(KernelTable& table) noexcept { FillAttend<Avx512Vnni>(table); }

}  // namespace ringkv::kernels
