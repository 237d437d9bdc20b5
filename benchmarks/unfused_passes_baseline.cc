// The unfused attention passes (unfused_passes.h) built for baseline x86-64 (SSE2),
// the scalar and SSE4.2 tiers' comparison (CMakeLists.txt).
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {
#include "unfused_passes-inl.h"
}  // namespace

void FillUnfusedBaseline(UnfusedPasses& passes) noexcept { Fill(passes); }

}  // namespace ringkv::bench
