#pragma once
// Instruction-set tiers the kernels are compiled for, and run-time CPU detection.
// On x86-64, detection reads CPUID and the OS save state (XCR0) itself: xsimd
// 8.1's own detection misreads AVX on AMD Zen hosts (see docs/kernels.md). On
// AArch64 Linux it reads the kernel's hwcap auxiliary vector.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringkv::kernels {

// x86-64 tiers are ordered from least to most capable (a higher one implies
// the lower ones); kNeon is the AArch64 tier, appended so that the x86 values
// stay what they were. A build compiles the scalar tier plus its own family's:
// sse42/avx2/avx512 on x86-64, neon on AArch64.
enum class Isa { kScalar, kSse42, kAvx2, kAvx512, kNeon };

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
  // int16 / int8 dot products (vpdpwssd, vpdpbusd). Not needed by the AVX-512
  // tier, whose int8 / int4 attention uses it where the CPU has it.
  bool avx512vnni = false;
  // bf16 pair dot products (vdpbf16ps). Not needed by the AVX-512 tier either,
  // whose decode over bf16 K uses it where the CPU has it together with VNNI.
  bool avx512bf16 = false;
  // AArch64 (Linux hwcaps). Advanced SIMD is part of the base architecture, so
  // asimd is set on every AArch64 Linux system; the others are reported for
  // ringkv_cpuinfo and for kernels that would use them (none does yet).
  bool asimd = false;
  bool asimdhp = false;  // f16 arithmetic in Advanced SIMD (FEAT_FP16; with fphp)
  bool fphp = false;     // scalar f16 arithmetic (FEAT_FP16)
  bool asimddp = false;  // SDOT/UDOT int8 dot products (FEAT_DotProd)
};

CpuFeatures DetectCpu() noexcept;

// Whether `isa` can run on a CPU with `features`.
bool IsaRunsOn(Isa isa, const CpuFeatures& features) noexcept;

// Whether this build compiled the tier in: scalar always; sse42, avx2 and
// avx512 on x86-64 (AVX-512 can be switched off with RINGKV_ENABLE_AVX512=OFF);
// neon on AArch64.
bool IsaCompiled(Isa isa) noexcept;

std::string_view IsaName(Isa isa) noexcept;  // "sse4.2", "avx2+fma+f16c", "neon", ...

// The spelling of a tier in RINGKV_ISA: "scalar", "sse42", "avx2", "avx512" or
// "neon".
std::string_view IsaKey(Isa isa) noexcept;
// The tier a RINGKV_ISA spelling names (exact match), or nullopt.
std::optional<Isa> IsaFromKey(std::string_view key) noexcept;

// Whether `isa` is within a tier cap of `cap`. The cap is a vector width, so
// that one value means the same on every machine: scalar, then 128-bit (sse42,
// neon), then 256-bit (avx2), then 512-bit (avx512). So RINGKV_ISA=avx2 on an
// AArch64 machine still allows neon, and RINGKV_ISA=neon on x86-64 means sse42.
bool IsaWithinCap(Isa isa, Isa cap) noexcept;

// The process-wide tier cap: no kernel of this process runs a tier above `cap`
// (in the sense of IsaWithinCap).
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
