// Prints the CPU features ringkv detected and the kernel tier it will run.
#include <cstdio>
#include <string>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"

int main() {
  using namespace ringkv::kernels;
  const CpuFeatures f = DetectCpu();
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::printf("sse4.2 %s | avx %s | avx2 %s | fma %s | f16c %s\n", yes(f.sse42), yes(f.avx),
              yes(f.avx2), yes(f.fma), yes(f.f16c));
  std::printf("avx512f %s | avx512dq %s | avx512bw %s | avx512vl %s\n", yes(f.avx512f),
              yes(f.avx512dq), yes(f.avx512bw), yes(f.avx512vl));
  std::printf("tiers: ");
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512}) {
    const char* state = !IsaCompiled(isa)   ? "not compiled"
                        : IsaRunsOn(isa, f) ? "available"
                                            : "unsupported by this CPU";
    std::printf("%s (%s)  ", std::string(IsaName(isa)).c_str(), state);
  }
  std::printf("\nchosen: %s\n", std::string(IsaName(BestKernels().isa)).c_str());
  return 0;
}
