#pragma once
// Instruction-set tiers the kernels are compiled for, and run-time CPU detection.
// Detection reads CPUID and the OS save state (XCR0) itself: xsimd 8.1's own
// detection misreads AVX on AMD Zen hosts (see docs/kernels.md).

#include <optional>
#include <string>
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
  bool avx512cd = false;
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

std::string_view IsaName(Isa isa) noexcept;  // "sse4.2", "avx2+fma+f16c", ...

// The spelling of a tier in RINGKV_ISA: "scalar", "sse42", "avx2" or "avx512".
std::string_view IsaKey(Isa isa) noexcept;
// The tier a RINGKV_ISA spelling names (exact match), or nullopt.
std::optional<Isa> IsaFromKey(std::string_view key) noexcept;

// The process-wide tier cap: no kernel of this process runs a tier above `cap`.
// Read from the environment variable RINGKV_ISA once, at the first call of
// TierCap(), KernelsFor(), BestKernels() or AvailableIsas(), and immutable after
// that (docs/kernels.md, "Capping the tier"). Unset or empty means no cap. A value
// that names no tier caps at kScalar, prints one warning line on stderr, and makes
// every ringkv::Context construction throw.
struct TierCapSetting {
  Isa cap = Isa::kAvx512;
  std::string value;  // RINGKV_ISA as read at first use; empty when unset
  bool valid = true;  // false when `value` names no tier
};
const TierCapSetting& TierCap() noexcept;

// Every tier that is compiled in, runs on this CPU and is within TierCap(),
// lowest first.
std::vector<Isa> AvailableIsas();

}  // namespace ringkv::kernels
