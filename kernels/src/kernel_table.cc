// Builds each tier's table once (function-local statics: immutable after
// construction, so there is no mutable global state) and picks the best one
// within the process's tier cap.
#include "ringkv/kernels/kernel_table.h"

#include "fill_kernels.h"

namespace ringkv::kernels {
namespace {

KernelTable Make(Isa isa, void (*fill)(KernelTable&) noexcept) {
  KernelTable table;
  table.isa = isa;
  fill(table);
  return table;
}

// Each table is filled the first time it is asked for, and only after the
// caller has checked that the tier runs here: a fill function is compiled with
// its tier's flags and may itself use that tier's instructions.
const KernelTable* Compiled(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar: {
      static const KernelTable scalar = Make(Isa::kScalar, FillScalarKernels);
      return &scalar;
    }
#ifdef RINGKV_HAVE_X86_TIERS
    case Isa::kSse42: {
      static const KernelTable sse42 = Make(Isa::kSse42, FillSse42Kernels);
      return &sse42;
    }
    case Isa::kAvx2: {
      static const KernelTable avx2 = Make(Isa::kAvx2, FillAvx2Kernels);
      return &avx2;
    }
#else
    case Isa::kSse42:
    case Isa::kAvx2:
      return nullptr;
#endif
    case Isa::kAvx512: {
#ifdef RINGKV_HAVE_AVX512
      static const KernelTable avx512 = [] {
        KernelTable table = Make(Isa::kAvx512, FillAvx512Kernels);
        // The same integer sums in fewer instructions where the CPU can
        // (isa_avx512_vnni.cc), and bf16 decode in bf16 dot products
        // (isa_avx512_bf16.cc); the rest of the tier uses neither.
        const CpuFeatures cpu = DetectCpu();
        if (cpu.avx512vnni && cpu.avx512bf16) {
          FillAvx512Bf16Attend(table);
        } else if (cpu.avx512vnni) {
          FillAvx512VnniAttend(table);
        }
        return table;
      }();
      return &avx512;
#else
      return nullptr;
#endif
    }
    case Isa::kNeon: {
#ifdef RINGKV_HAVE_NEON
      static const KernelTable neon = Make(Isa::kNeon, FillNeonKernels);
      return &neon;
#else
      return nullptr;
#endif
    }
  }
  return nullptr;
}

}  // namespace

const KernelTable* KernelsFor(Isa isa) noexcept {
  static const CpuFeatures features = DetectCpu();
  if (!IsaCompiled(isa) || !IsaRunsOn(isa, features) || !IsaWithinCap(isa, TierCap().cap))
    return nullptr;
  return Compiled(isa);
}

const KernelTable& BestKernels() noexcept {
  static const KernelTable& best = []() -> const KernelTable& {
    for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kSse42, Isa::kNeon}) {
      if (const KernelTable* t = KernelsFor(isa)) return *t;
    }
    return *Compiled(Isa::kScalar);
  }();
  return best;
}

}  // namespace ringkv::kernels
