#include "unfused_passes.h"

#include <gsl/assert>

#include "ringkv/kernels/kernel_table.h"

namespace ringkv::bench {

UnfusedPasses UnfusedPassesFor(kernels::Isa isa) {
  Expects(kernels::KernelsFor(isa) != nullptr);
  UnfusedPasses passes;
  switch (isa) {
    case kernels::Isa::kScalar:
      FillUnfusedScalar(passes);
      break;
    case kernels::Isa::kSse42:
      FillUnfusedBaseline(passes);
      break;
    case kernels::Isa::kAvx2:
      FillUnfusedAvx2(passes);
      break;
    case kernels::Isa::kAvx512:
#if RINGKV_HAVE_AVX512
      FillUnfusedAvx512(passes);
#endif
      break;
    case kernels::Isa::kNeon:
      break;  // the benchmarks are x86-64 only (docs/arm64.md), so KernelsFor(kNeon) is null
  }
  Ensures(passes.scores != nullptr);
  return passes;
}

}  // namespace ringkv::bench
