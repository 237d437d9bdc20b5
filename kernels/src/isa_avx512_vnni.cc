// The AVX-512 tier's attend kernel once more, compiled with -mavx512vnni as well:
// the integer decode steps of int8 and int4 K/V add each int16 multiply-add into
// its accumulator in one vpdpwssd (I16Dot::MaddAdd) instead of vpmaddwd + vpaddd.
// kernel_table.cc puts it in the AVX-512 table on CPUs that have AVX512-VNNI
// but not AVX512-BF16 (isa_avx512_bf16.cc). Exports only FillAvx512VnniAttend;
// its arch is its own (avx512_extension_arch.h).
#include "attend-inl.h"
#include "attend_quant-inl.h"
#include "avx512_extension_arch.h"
#include "fill_kernels.h"

namespace ringkv::kernels {
namespace {
struct Vnni {
  static constexpr const char* kName = "avx512bw+vnni";
};
}  // namespace

void FillAvx512VnniAttend(KernelTable& table) noexcept { FillAttend<Avx512Extension<Vnni>>(table); }

}  // namespace ringkv::kernels
