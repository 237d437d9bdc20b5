// The unfused attention passes (unfused_passes.h) built for baseline x86-64 without
// auto-vectorisation (CMakeLists.txt): the scalar tier's kernels run one lane at a time.
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {
#include "unfused_passes-inl.h"
}  // namespace

void FillUnfusedScalar(UnfusedPasses& passes) noexcept { Fill(passes); }

}  // namespace ringkv::bench
