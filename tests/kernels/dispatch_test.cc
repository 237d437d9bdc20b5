// Tier dispatch: which tables exist, which one is best, the IsaRunsOn rules for
// synthetic CPUs (the host can only show one), the detector against the
// compiler's own, and the process tier cap (RINGKV_ISA). ctest runs this suite
// once per tier cap (tests/CMakeLists.txt), so the cap checks see every value.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "tier_cap.h"
#ifdef RINGKV_HAVE_AVX512
#include "fill_kernels.h"
#endif

namespace ringkv::kernels {
namespace {

const Isa kAllTiers[] = {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512, Isa::kNeon};

bool Contains(const std::vector<Isa>& isas, Isa isa) {
  for (Isa i : isas) {
    if (i == isa) return true;
  }
  return false;
}

// Every entry point of a table. A new entry makes the static_assert fail until it
// is listed here, so a tier that forgets to fill it cannot pass unnoticed.
// (isa and four functions; attend_rounds_bf16_queries is a property, padded to a word.)
static_assert(sizeof(KernelTable) == 6 * sizeof(void*),
              "KernelTable gained an entry: add it to EntryPoints()");
std::vector<std::pair<const char*, bool>> EntryPoints(const KernelTable& t) {
  return {{"convert", t.convert != nullptr},
          {"convert_rows", t.convert_rows != nullptr},
          {"ring_gather", t.ring_gather != nullptr},
          {"attend", t.attend != nullptr}};
}

TEST(DispatchTest, EveryAvailableTierHasAFullyFilledTableOfThatTier) {
  const std::vector<Isa> available = AvailableIsas();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.front(), Isa::kScalar);  // the scalar tier runs everywhere
  for (Isa isa : available) {
    const KernelTable* table = KernelsFor(isa);
    ASSERT_NE(table, nullptr) << IsaName(isa);
    EXPECT_EQ(table->isa, isa) << IsaName(isa);
    for (const auto& [name, filled] : EntryPoints(*table)) {
      EXPECT_TRUE(filled) << IsaName(isa) << " leaves " << name << " null";
    }
    EXPECT_EQ(KernelsFor(isa), table) << "the same immutable table every time";
  }
}

TEST(DispatchTest, UnavailableTiersHaveNoTable) {
  const std::vector<Isa> available = AvailableIsas();
  for (Isa isa : kAllTiers) {
    if (!Contains(available, isa)) {
      EXPECT_EQ(KernelsFor(isa), nullptr) << IsaName(isa);
    }
  }
}

// The cap RINGKV_ISA asks for, read here independently of the library: the
// documented spellings, no cap when unset or empty, scalar for anything else.
Isa ExpectedCap() {
  const char* value = std::getenv("RINGKV_ISA");
  if (value == nullptr || *value == '\0') return Isa::kAvx512;
  const std::string_view v = value;
  if (v == "avx512") return Isa::kAvx512;
  if (v == "avx2") return Isa::kAvx2;
  if (v == "sse42") return Isa::kSse42;
  if (v == "neon") return Isa::kNeon;
  return Isa::kScalar;
}

// The documented meaning of a cap (isa.h): a vector width in bits, whatever the
// family, so that one RINGKV_ISA value means the same on x86-64 and AArch64.
int WidthBits(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return 32;
    case Isa::kSse42:
    case Isa::kNeon:
      return 128;
    case Isa::kAvx2:
      return 256;
    case Isa::kAvx512:
      return 512;
  }
  return 0;
}

bool WithinExpectedCap(Isa isa) { return WidthBits(isa) <= WidthBits(ExpectedCap()); }

TEST(DispatchTest, AvailableTiersAreCompiledRunnableWithinTheCapAndOrdered) {
  const std::vector<Isa> available = AvailableIsas();
  const CpuFeatures host = DetectCpu();
  for (Isa isa : kAllTiers) {
    EXPECT_EQ(Contains(available, isa),
              IsaCompiled(isa) && IsaRunsOn(isa, host) && WithinExpectedCap(isa))
        << IsaName(isa);
  }
  for (std::size_t i = 1; i < available.size(); ++i) {
    EXPECT_LT(WidthBits(available[i - 1]), WidthBits(available[i]));
  }
}

TEST(DispatchTest, BestKernelsIsTheHighestAvailableTier) {
  const std::vector<Isa> available = AvailableIsas();
  EXPECT_EQ(BestKernels().isa, available.back());
  EXPECT_EQ(&BestKernels(), KernelsFor(available.back()));
}

// Conversions and cache writes run BestKernels(), attention runs a Context's
// table (from KernelsFor or BestKernels): the cap must bound both.
TEST(DispatchTest, BestKernelsAndKernelsForHonourTheTierCap) {
  const Isa cap = ExpectedCap();
  const CpuFeatures host = DetectCpu();
  Isa expected_best = Isa::kScalar;
  for (Isa isa : kAllTiers) {
    if (WithinExpectedCap(isa) && IsaCompiled(isa) && IsaRunsOn(isa, host)) {
      if (WidthBits(isa) > WidthBits(expected_best)) expected_best = isa;
    }
  }
  EXPECT_EQ(BestKernels().isa, expected_best) << "RINGKV_ISA caps at " << IsaName(cap);
  for (Isa isa : kAllTiers) {
    if (!WithinExpectedCap(isa)) {
      EXPECT_EQ(KernelsFor(isa), nullptr) << IsaName(isa) << " is above the cap";
    }
  }
}

TEST(DispatchTest, TierCapIsTheOneReadFromTheEnvironment) {
  EXPECT_EQ(TierCap().cap, ExpectedCap());
  const char* value = std::getenv("RINGKV_ISA");
  EXPECT_EQ(TierCap().value, value == nullptr ? "" : value);
  EXPECT_EQ(&TierCap(), &TierCap()) << "read once";
}

TEST(DispatchTest, SettingTheVariableLaterChangesNothing) {
  const Isa cap = TierCap().cap;
  const KernelTable* best = &BestKernels();
  const char* before = std::getenv("RINGKV_ISA");
  const std::string saved = before == nullptr ? "" : before;
  ASSERT_EQ(setenv("RINGKV_ISA", cap == Isa::kScalar ? "avx512" : "scalar", 1), 0);
  EXPECT_EQ(TierCap().cap, cap);
  EXPECT_EQ(&BestKernels(), best);
  EXPECT_EQ(AvailableIsas().back(), best->isa);
  if (before == nullptr) {
    unsetenv("RINGKV_ISA");
  } else {
    setenv("RINGKV_ISA", saved.c_str(), 1);
  }
}

TEST(TierCapTest, EveryTierKeyParsesToItsTier) {
  for (Isa isa : kAllTiers) {
    const std::string key(IsaKey(isa));
    const TierCapSetting setting = internal::ParseTierCap(key.c_str());
    EXPECT_EQ(setting.cap, isa) << key;
    EXPECT_TRUE(setting.valid) << key;
    EXPECT_EQ(setting.value, key);
    EXPECT_EQ(IsaFromKey(key), isa);
  }
}

TEST(TierCapTest, ACapIsAVectorWidthInEitherFamily) {
  for (Isa isa : kAllTiers) {
    for (Isa cap : kAllTiers) {
      EXPECT_EQ(IsaWithinCap(isa, cap), WidthBits(isa) <= WidthBits(cap))
          << IsaKey(isa) << " under " << IsaKey(cap);
    }
  }
  // The cases that matter across families: an x86 cap on AArch64 and back.
  EXPECT_TRUE(IsaWithinCap(Isa::kNeon, Isa::kAvx2));
  EXPECT_TRUE(IsaWithinCap(Isa::kNeon, Isa::kSse42));
  EXPECT_FALSE(IsaWithinCap(Isa::kNeon, Isa::kScalar));
  EXPECT_TRUE(IsaWithinCap(Isa::kSse42, Isa::kNeon));
  EXPECT_FALSE(IsaWithinCap(Isa::kAvx2, Isa::kNeon));
}

TEST(TierCapTest, UnsetOrEmptyMeansNoCap) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    const TierCapSetting setting = internal::ParseTierCap(value);
    EXPECT_EQ(setting.cap, Isa::kAvx512);
    EXPECT_TRUE(setting.valid);
    EXPECT_EQ(setting.value, "");
  }
}

TEST(TierCapTest, AValueThatNamesNoTierCapsAtScalarAndIsMarkedInvalid) {
  // Display names, other case, spaces and typos are not tier keys.
  for (const char* value :
       {"bogus", "AVX2", "sse4.2", "avx2+fma+f16c", " avx2", "avx512 ", "avx"}) {
    const TierCapSetting setting = internal::ParseTierCap(value);
    EXPECT_EQ(setting.cap, Isa::kScalar) << value;
    EXPECT_FALSE(setting.valid) << value;
    EXPECT_EQ(setting.value, value);
    EXPECT_EQ(IsaFromKey(value), std::nullopt) << value;
  }
}

CpuFeatures Avx2Cpu() {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures Avx512Cpu() {
  CpuFeatures f = Avx2Cpu();
  f.avx512f = f.avx512cd = f.avx512dq = f.avx512bw = f.avx512vl = true;
  return f;
}

TEST(IsaRunsOnTest, NoFeaturesRunsOnlyScalar) {
  const CpuFeatures none;
  EXPECT_TRUE(IsaRunsOn(Isa::kScalar, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kSse42, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kNeon, none));
}

TEST(IsaRunsOnTest, NeonNeedsAsimdAndNoFamilyRunsTheOthers) {
  CpuFeatures arm;
  arm.asimd = true;
  EXPECT_TRUE(IsaRunsOn(Isa::kNeon, arm));
  EXPECT_TRUE(IsaRunsOn(Isa::kScalar, arm));
  EXPECT_FALSE(IsaRunsOn(Isa::kSse42, arm));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, arm));
  EXPECT_FALSE(IsaRunsOn(Isa::kNeon, Avx512Cpu()));
}

TEST(IsaRunsOnTest, Sse42Only) {
  CpuFeatures f;
  f.sse42 = true;
  EXPECT_TRUE(IsaRunsOn(Isa::kSse42, f));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, f));
}

TEST(IsaRunsOnTest, Avx2TierNeedsFmaAndF16c) {
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx2, Avx2Cpu()));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, Avx2Cpu()));
  CpuFeatures no_f16c = Avx2Cpu();
  no_f16c.f16c = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, no_f16c));
  EXPECT_TRUE(IsaRunsOn(Isa::kSse42, no_f16c));
  CpuFeatures no_fma = Avx2Cpu();
  no_fma.fma = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, no_fma));
  CpuFeatures no_avx2 = Avx2Cpu();
  no_avx2.avx2 = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, no_avx2));
}

TEST(IsaRunsOnTest, Avx512TierNeedsFCdDqBwVlAndTheAvx2Tier) {
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx512, Avx512Cpu()));
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx2, Avx512Cpu()));
  CpuFeatures no_bw = Avx512Cpu();
  no_bw.avx512bw = false;  // e.g. Knights Landing: AVX-512F without BW
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, no_bw));
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx2, no_bw));
  CpuFeatures no_dq = Avx512Cpu();
  no_dq.avx512dq = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, no_dq));
  CpuFeatures no_vl = Avx512Cpu();
  no_vl.avx512vl = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, no_vl));
  CpuFeatures no_f16c = Avx512Cpu();
  no_f16c.f16c = false;
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, no_f16c));
  CpuFeatures no_cd = Avx512Cpu();
  no_cd.avx512cd = false;  // the AVX-512 unit is compiled with -mavx512cd
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, no_cd));
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx2, no_cd));
  CpuFeatures vnni = Avx512Cpu();  // VNNI is used where present, never required
  vnni.avx512vnni = true;
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx512, vnni));
  EXPECT_FALSE(Avx512Cpu().avx512vnni);
  CpuFeatures bf16 = vnni;  // nor BF16
  bf16.avx512bf16 = true;
  EXPECT_TRUE(IsaRunsOn(Isa::kAvx512, bf16));
  EXPECT_FALSE(Avx512Cpu().avx512bf16);
}

#ifdef RINGKV_HAVE_AVX512
// Where this process runs the AVX-512 tier: an empty list elsewhere.
std::vector<Isa> Avx512Here() {
  if (KernelsFor(Isa::kAvx512) == nullptr) return {};
  return {Isa::kAvx512};
}

class Avx512TableTest : public ::testing::TestWithParam<Isa> {};

// The tier's table takes the attend of isa_avx512_bf16.cc when the CPU has
// AVX512-VNNI and AVX512-BF16, that of isa_avx512_vnni.cc when it has VNNI only,
// and every other entry from the plain AVX-512 unit.
TEST_P(Avx512TableTest, HoldsTheAttendOfTheCpusExtensions) {
  KernelTable plain;
  plain.isa = Isa::kAvx512;
  FillAvx512Kernels(plain);
  KernelTable vnni = plain;
  FillAvx512VnniAttend(vnni);
  KernelTable bf16 = plain;
  FillAvx512Bf16Attend(bf16);
  ASSERT_NE(vnni.attend, plain.attend);
  ASSERT_NE(bf16.attend, vnni.attend);
  const CpuFeatures cpu = DetectCpu();
  const bool with_bf16 = cpu.avx512vnni && cpu.avx512bf16;
  const KernelTable& want = with_bf16 ? bf16 : cpu.avx512vnni ? vnni : plain;
  const KernelTable& table = *KernelsFor(GetParam());
  EXPECT_EQ(table.attend, want.attend);
  EXPECT_EQ(table.attend_rounds_bf16_queries, with_bf16);
  EXPECT_FALSE(vnni.attend_rounds_bf16_queries);
  EXPECT_EQ(table.convert, plain.convert);
  EXPECT_EQ(table.convert_rows, plain.convert_rows);
  EXPECT_EQ(table.ring_gather, plain.ring_gather);
}

INSTANTIATE_TEST_SUITE_P(Tiers, Avx512TableTest, ::testing::ValuesIn(Avx512Here()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Avx512TableTest);
#endif

#if defined(__x86_64__) || defined(__i386__)
// The compiler's runtime (libgcc / compiler-rt) reads CPUID and XCR0 on its own:
// every feature both can name must agree with DetectCpu() on this host.
TEST(DetectCpuTest, AgreesWithTheCompilersCpuSupports) {
  __builtin_cpu_init();
  const CpuFeatures f = DetectCpu();
  EXPECT_EQ(f.sse42, __builtin_cpu_supports("sse4.2") != 0) << "sse4.2";
  EXPECT_EQ(f.avx, __builtin_cpu_supports("avx") != 0) << "avx";
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0) << "avx2";
  EXPECT_EQ(f.fma, __builtin_cpu_supports("fma") != 0) << "fma";
#ifndef __clang__  // Clang 14 cannot name f16c
  EXPECT_EQ(f.f16c, __builtin_cpu_supports("f16c") != 0) << "f16c";
#endif
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0) << "avx512f";
  EXPECT_EQ(f.avx512cd, __builtin_cpu_supports("avx512cd") != 0) << "avx512cd";
  EXPECT_EQ(f.avx512dq, __builtin_cpu_supports("avx512dq") != 0) << "avx512dq";
  EXPECT_EQ(f.avx512bw, __builtin_cpu_supports("avx512bw") != 0) << "avx512bw";
  EXPECT_EQ(f.avx512vl, __builtin_cpu_supports("avx512vl") != 0) << "avx512vl";
  EXPECT_EQ(f.avx512vnni, __builtin_cpu_supports("avx512vnni") != 0) << "avx512vnni";
  EXPECT_EQ(f.avx512bf16, __builtin_cpu_supports("avx512bf16") != 0) << "avx512bf16";
}
#elif defined(__aarch64__) && defined(__linux__)
// The kernel's hwcap word read from /proc/self/auxv ((type, value) pairs of
// 64-bit words, AT_NULL last), not through getauxval as DetectCpu() does.
std::uint64_t HwcapFromProcfs() {
  std::ifstream auxv("/proc/self/auxv", std::ios::binary);
  std::uint64_t pair[2];
  while (auxv.read(reinterpret_cast<char*>(pair), sizeof pair)) {
    if (pair[0] == 16) return pair[1];  // AT_HWCAP
    if (pair[0] == 0) break;            // AT_NULL
  }
  ADD_FAILURE() << "no AT_HWCAP in /proc/self/auxv";
  return 0;
}

TEST(DetectCpuTest, AgreesWithTheAuxiliaryVectorFile) {
  const std::uint64_t hwcap = HwcapFromProcfs();
  const CpuFeatures f = DetectCpu();
  // Bit numbers from the AArch64 Linux ABI (arch/arm64/include/uapi/asm/hwcap.h).
  EXPECT_EQ(f.asimd, ((hwcap >> 1) & 1) != 0) << "asimd";
  EXPECT_EQ(f.fphp, ((hwcap >> 9) & 1) != 0) << "fphp";
  EXPECT_EQ(f.asimdhp, ((hwcap >> 10) & 1) != 0) << "asimdhp";
  EXPECT_EQ(f.asimddp, ((hwcap >> 20) & 1) != 0) << "asimddp";
  // Advanced SIMD is part of the base architecture: the NEON tier always runs.
  EXPECT_TRUE(f.asimd);
  EXPECT_TRUE(IsaRunsOn(Isa::kNeon, f));
  EXPECT_FALSE(f.sse42 || f.avx || f.avx2 || f.avx512f);
}
#endif

}  // namespace
}  // namespace ringkv::kernels
