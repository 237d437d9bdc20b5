// Prints the CPU features ringkv detected, the process tier cap (RINGKV_ISA) and
// the kernel tier it will run.
#include <cstdio>
#include <string>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"

int main() {
  using namespace ringkv::kernels;
  const CpuFeatures f = DetectCpu();
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  // The features of the family this build targets (the other family's read "no").
  if (IsaCompiled(Isa::kNeon)) {
    std::printf("asimd %s | asimdhp %s | fphp %s | asimddp %s\n", yes(f.asimd), yes(f.asimdhp),
                yes(f.fphp), yes(f.asimddp));
  } else {
    std::printf("sse4.2 %s | avx %s | avx2 %s | fma %s | f16c %s\n", yes(f.sse42), yes(f.avx),
                yes(f.avx2), yes(f.fma), yes(f.f16c));
    std::printf(
        "avx512f %s | avx512cd %s | avx512dq %s | avx512bw %s | avx512vl %s | avx512vnni %s | "
        "avx512bf16 %s\n",
        yes(f.avx512f), yes(f.avx512cd), yes(f.avx512dq), yes(f.avx512bw), yes(f.avx512vl),
        yes(f.avx512vnni), yes(f.avx512bf16));
  }
  const TierCapSetting& cap = TierCap();
  const std::string cap_key(IsaKey(cap.cap));
  if (cap.value.empty()) {
    std::printf("tier cap: none (RINGKV_ISA unset)\n");
  } else if (cap.valid) {
    std::printf("tier cap: %s (RINGKV_ISA=%s)\n", cap_key.c_str(), cap.value.c_str());
  } else {
    std::printf("tier cap: %s (RINGKV_ISA=%s names no tier; ringkv::Context refuses to start)\n",
                cap_key.c_str(), cap.value.c_str());
  }
  std::printf("tiers: ");
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    const char* state = !IsaCompiled(isa)             ? "not compiled"
                        : !IsaRunsOn(isa, f)          ? "unsupported by this CPU"
                        : !IsaWithinCap(isa, cap.cap) ? "above the cap"
                                                      : "available";
    std::printf("%s (%s)  ", std::string(IsaName(isa)).c_str(), state);
  }
  const Isa chosen = BestKernels().isa;
  // The AVX-512 tier runs int8 / int4 attention with VNNI where the CPU has it,
  // and bf16 decode (scores and V sums) with bf16 dot products where it has both.
  const bool vnni = chosen == Isa::kAvx512 && f.avx512vnni;
  const bool bf16 = vnni && f.avx512bf16;
  std::printf("\nchosen: %s%s\n", std::string(IsaName(chosen)).c_str(),
              bf16   ? " (int8 / int4 attention with VNNI, bf16 decode with AVX512-BF16)"
              : vnni ? " (int8 / int4 attention with VNNI)"
                     : "");
  return 0;
}
