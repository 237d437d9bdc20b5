// Tier dispatch: which tables exist, which one is best, and the IsaRunsOn rules
// for synthetic CPUs (the host can only show one).
#include <gtest/gtest.h>

#include <vector>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv::kernels {
namespace {

const Isa kAllTiers[] = {Isa::kScalar, Isa::kSse42, Isa::kAvx2, Isa::kAvx512};

bool Contains(const std::vector<Isa>& isas, Isa isa) {
  for (Isa i : isas) {
    if (i == isa) return true;
  }
  return false;
}

TEST(DispatchTest, EveryAvailableTierHasAFilledTableOfThatTier) {
  const std::vector<Isa> available = AvailableIsas();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.front(), Isa::kScalar);  // the scalar tier runs everywhere
  for (Isa isa : available) {
    const KernelTable* table = KernelsFor(isa);
    ASSERT_NE(table, nullptr) << IsaName(isa);
    EXPECT_EQ(table->isa, isa) << IsaName(isa);
    EXPECT_NE(table->convert, nullptr) << IsaName(isa);
    EXPECT_NE(table->ring_gather, nullptr) << IsaName(isa);
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

TEST(DispatchTest, AvailableTiersAreCompiledRunnableAndOrdered) {
  const std::vector<Isa> available = AvailableIsas();
  const CpuFeatures host = DetectCpu();
  for (Isa isa : kAllTiers) {
    EXPECT_EQ(Contains(available, isa), IsaCompiled(isa) && IsaRunsOn(isa, host)) << IsaName(isa);
  }
  for (std::size_t i = 1; i < available.size(); ++i) EXPECT_LT(available[i - 1], available[i]);
}

TEST(DispatchTest, BestKernelsIsTheHighestAvailableTier) {
  const std::vector<Isa> available = AvailableIsas();
  EXPECT_EQ(BestKernels().isa, available.back());
  EXPECT_EQ(&BestKernels(), KernelsFor(available.back()));
}

CpuFeatures Avx2Cpu() {
  CpuFeatures f;
  f.sse42 = f.avx = f.avx2 = f.fma = f.f16c = true;
  return f;
}

CpuFeatures Avx512Cpu() {
  CpuFeatures f = Avx2Cpu();
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = true;
  return f;
}

TEST(IsaRunsOnTest, NoFeaturesRunsOnlyScalar) {
  const CpuFeatures none;
  EXPECT_TRUE(IsaRunsOn(Isa::kScalar, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kSse42, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx2, none));
  EXPECT_FALSE(IsaRunsOn(Isa::kAvx512, none));
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

TEST(IsaRunsOnTest, Avx512TierNeedsFDqBwVlAndTheAvx2Tier) {
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
}

}  // namespace
}  // namespace ringkv::kernels
