// RaggedSdpa allocates nothing: its plan, run lists, scratch and partial states
// all live in the caller's workspace. Counted by replacing operator new
// (support/alloc_tracker.h), on every tier, with the prefix pass, own passes and
// the key-chunk split all taken on two threads.
#include <gtest/gtest.h>

#include <string>

#include "alloc_tracker.h"
#include "ragged_problem.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/ragged_sdpa.h"
#include "ringkv/kernels/thread_pool.h"
#include "sdpa_run.h"

namespace ringkv::kernels {
namespace {

using test::GroupSpec;
using test::I64;
using test::RaggedCase;
using test::Ranges;

class RaggedSdpaAllocTest : public ::testing::TestWithParam<Isa> {};

TEST_P(RaggedSdpaAllocTest, AllocatesNothing) {
  const KernelTable& table = *KernelsFor(GetParam());
  RaggedCase c{
      .hq = 4, .hkv = 2, .d = 32, .dv = 32, .dtype = DType::kF16, .prefixes = {{700, 300}}};
  for (I64 g = 0; g < 6; ++g) {
    c.groups.push_back(GroupSpec{.prefix = g % 2 == 0 ? 0 : -1,
                                 .own = {g * 300 + 1},
                                 .rows = g % 3 + 1,
                                 .ranges = g == 4 ? Ranges::kWindow : Ranges::kCausal,
                                 .window = 400});
  }
  c.loose_rows = 1;
  test::RaggedProblem p;
  test::MakeRaggedProblem(c, 9, p);
  ThreadPool pool(2);
  test::AlignedBytes workspace(RaggedSdpaWorkspaceBytes(ShapeOf(p.params), pool.Concurrency()));
  RaggedSdpa(p.params, table, pool, workspace.Span());  // the pool's threads are warm
  const std::size_t before = test::AllocationCount();
  RaggedSdpa(p.params, table, pool, workspace.Span());
  EXPECT_EQ(test::AllocationCount() - before, 0u);
  EXPECT_LE(test::RaggedMaxError(p, test::RaggedExpected(p, table)), 3e-7);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, RaggedSdpaAllocTest, ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           return std::string(IsaKey(param_info.param));
                         });

}  // namespace
}  // namespace ringkv::kernels
