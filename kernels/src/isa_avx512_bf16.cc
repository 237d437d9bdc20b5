// The AVX-512 tier's attend kernel a third time, compiled with -mavx512vnni and
// -mavx512bf16: the VNNI unit's integer decode (isa_avx512_vnni.cc), and decode
// tiles over bf16 K take their scores in vdpbf16ps pair dot products (Bf16Dot,
// attend-inl.h) over queries rounded to bf16 (docs/kernels.md, "bf16 decode
// scores"). kernel_table.cc puts it in the AVX-512 table on CPUs that have both
// AVX512-VNNI and AVX512-BF16 (every CPU with the second has the first). Its
// bf16 decode also adds V in vdpbf16ps, over softmax weights rounded to bf16.
// Exports only FillAvx512Bf16Attend; its arch is its own (avx512_extension_arch.h).
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "avx512_extension_arch.h"
#include "fill_kernels.h"

namespace ringkv::kernels {
namespace {
struct VnniBf16 {
  static constexpr const char* kName = "avx512bw+vnni+bf16";
};
}  // namespace

void FillAvx512Bf16Attend(KernelTable& table) noexcept {
  FillAttend<Avx512Extension<VnniBf16>>(table);
  table.attend_rounds_bf16_queries = true;
  table.attend_rounds_bf16_weights = true;
}

}  // namespace ringkv::kernels
