// CPU detection, the OS's way on each architecture.
// x86-64: CPUID and XCR0 directly. xsimd 8.1's detection reads AVX from the
// wrong CPUID leaf and never checks that the OS saves the wide registers, so it
// cannot be trusted to pick a tier (docs/kernels.md).
// AArch64 Linux: the hwcap words of the auxiliary vector, which the kernel
// fills from the ID registers it may read and user code may not.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include <cstdint>

#include "ringkv/kernels/isa.h"

namespace ringkv::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs Cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return Regs{};
  return r;
}

// XCR0: which register files the OS saves on a context switch. Only valid to
// read when CPUID reports OSXSAVE.
std::uint64_t ReadXcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}

bool Bit(unsigned value, int bit) { return ((value >> bit) & 1u) != 0; }

void DetectX86(CpuFeatures& f) {
  const Regs leaf1 = Cpuid(1, 0);
  const Regs leaf7 = Cpuid(7, 0);
  const Regs leaf7_1 = leaf7.eax >= 1 ? Cpuid(7, 1) : Regs{};  // eax: last subleaf
  f.sse42 = Bit(leaf1.ecx, 20);
  const bool osxsave = Bit(leaf1.ecx, 27);
  const std::uint64_t xcr0 = osxsave ? ReadXcr0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE and AVX state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  f.avx = os_ymm && Bit(leaf1.ecx, 28);
  f.fma = f.avx && Bit(leaf1.ecx, 12);
  f.f16c = f.avx && Bit(leaf1.ecx, 29);
  f.avx2 = f.avx && Bit(leaf7.ebx, 5);
  f.avx512f = os_zmm && Bit(leaf7.ebx, 16);
  f.avx512dq = f.avx512f && Bit(leaf7.ebx, 17);
  f.avx512cd = f.avx512f && Bit(leaf7.ebx, 28);
  f.avx512bw = f.avx512f && Bit(leaf7.ebx, 30);
  f.avx512vl = f.avx512f && Bit(leaf7.ebx, 31);
  f.avx512vnni = f.avx512f && Bit(leaf7.ecx, 11);
  f.avx512bf16 = f.avx512f && Bit(leaf7_1.eax, 5);
}

#elif defined(__aarch64__) && defined(__linux__)

void DetectAarch64(CpuFeatures& f) {
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.asimd = (hwcap & HWCAP_ASIMD) != 0;
  f.fphp = (hwcap & HWCAP_FPHP) != 0;
  f.asimdhp = (hwcap & HWCAP_ASIMDHP) != 0;
  f.asimddp = (hwcap & HWCAP_ASIMDDP) != 0;
}

#endif

// The vector width a tier cap stands for (isa.h, IsaWithinCap).
int CapRank(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return 0;
    case Isa::kSse42:
    case Isa::kNeon:
      return 1;
    case Isa::kAvx2:
      return 2;
    case Isa::kAvx512:
      return 3;
  }
  return 0;
}

}  // namespace

CpuFeatures DetectCpu() noexcept {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  DetectX86(f);
#elif defined(__aarch64__) && defined(__linux__)
  DetectAarch64(f);
#endif
  return f;
}

bool IsaWithinCap(Isa isa, Isa cap) noexcept { return CapRank(isa) <= CapRank(cap); }

bool IsaRunsOn(Isa isa, const CpuFeatures& f) noexcept {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kSse42:
      return f.sse42;
    case Isa::kAvx2:
      return f.sse42 && f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512:
      // CD because the unit is compiled with -mavx512cd (and xsimd's avx512bw
      // arch derives from avx512cd): the compiler may use it anywhere there.
      return f.sse42 && f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512cd && f.avx512dq &&
             f.avx512bw && f.avx512vl;
    case Isa::kNeon:
      return f.asimd;
  }
  return false;
}

bool IsaCompiled(Isa isa) noexcept {
#ifdef RINGKV_HAVE_X86_TIERS
  constexpr bool kHaveX86 = true;
#else
  constexpr bool kHaveX86 = false;
#endif
#ifdef RINGKV_HAVE_AVX512
  constexpr bool kHaveAvx512 = true;
#else
  constexpr bool kHaveAvx512 = false;
#endif
#ifdef RINGKV_HAVE_NEON
  constexpr bool kHaveNeon = true;
#else
  constexpr bool kHaveNeon = false;
#endif
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kSse42:
    case Isa::kAvx2:
      return kHaveX86;
    case Isa::kAvx512:
      return kHaveAvx512;
    case Isa::kNeon:
      return kHaveNeon;
  }
  return false;
}

std::string_view IsaName(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kSse42:
      return "sse4.2";
    case Isa::kAvx2:
      return "avx2+fma+f16c";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
  }
  return "unknown";
}

std::string_view IsaKey(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kSse42:
      return "sse42";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
  }
  return "unknown";
}

std::optional<Isa> IsaFromKey(std::string_view key) noexcept {
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (key == IsaKey(isa)) return isa;
  }
  return std::nullopt;
}

std::vector<Isa> AvailableIsas() {
  const CpuFeatures f = DetectCpu();
  const Isa cap = TierCap().cap;
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kSse42, Isa::kNeon, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaCompiled(isa) && IsaRunsOn(isa, f) && IsaWithinCap(isa, cap)) out.push_back(isa);
  }
  return out;
}

}  // namespace ringkv::kernels
