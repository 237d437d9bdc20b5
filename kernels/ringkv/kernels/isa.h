#pragma once
// Instruction-set tiers the kernels are compiled for, and run-time CPU detection.
// Detection reads CPUID and the OS save state (XCR0) itself: xsimd 8.1's own
// detection misreads AVX on AMD Zen hosts (see docs/kernels.md).

#include <string_view>
#include <vector>

namespace ringkv::kernels {

// Ordered from least to most capable; a higher tier implies the lower ones.
enum class Isa { kScalar, kSse42, kAvx2, kAvx512 };

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;  // CPU has AVX and the OS saves YMM state
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;  // CPU has it and the OS saves ZMM/opmask state
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
};

CpuFeatures DetectCpu() noexcept;

// Whether `isa` can run on a CPU with `features`.
bool IsaRunsOn(Isa isa, const CpuFeatures& features) noexcept;

// Whether this build compiled the tier in (AVX-512 can be switched off with
// RINGKV_ENABLE_AVX512=OFF).
bool IsaCompiled(Isa isa) noexcept;

std::string_view IsaName(Isa isa) noexcept;

// Every tier that is compiled in and runs on this CPU, lowest first.
std::vector<Isa> AvailableIsas();

}  // namespace ringkv::kernels
