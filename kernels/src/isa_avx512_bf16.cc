// The AVX-512 tier's attend kernel a third time, compiled with -mavx512vnni and
// -mavx512bf16: the VNNI unit's integer decode (isa_avx512_vnni.cc), and decode
// tiles over bf16 K take their scores in vdpbf16ps pair dot products (Bf16Dot,
// attend-inl.h) with the queries rounded to bf16. kernel_table.cc puts it in
// the AVX-512 table on CPUs that have both AVX512-VNNI and AVX512-BF16 (every
// CPU with the second has the first). Exports only FillAvx512Bf16Attend.
//
// Its own arch in an anonymous namespace, for the reason isa_avx512_vnni.cc
// gives: no weak xsimd instance of this unit may stand in for another unit's.
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "fill_kernels.h"

namespace ringkv::kernels {
namespace {
struct Avx512Bf16 : xsimd::avx512bw {
  static constexpr char const* name() noexcept { return "avx512bw+vnni+bf16"; }
};
}  // namespace
}  // namespace ringkv::kernels

namespace xsimd::types {
template <class T>
struct get_bool_simd_register<T, ringkv::kernels::Avx512Bf16> {
  using type = simd_avx512_bool_register<T>;
};
XSIMD_DECLARE_SIMD_REGISTER_ALIAS(ringkv::kernels::Avx512Bf16, avx512bw);
}  // namespace xsimd::types

namespace ringkv::kernels {

void FillAvx512Bf16Attend(KernelTable& table) noexcept {
  FillAttend<Avx512Bf16>(table);
  table.attend_rounds_bf16_queries = true;
}

}  // namespace ringkv::kernels
