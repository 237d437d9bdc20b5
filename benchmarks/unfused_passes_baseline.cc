// The unfused attention passes (unfused_passes.h) built for baseline x86-64 (SSE2),
// the SSE4.2 tier's comparison (CMakeLists.txt).
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {
#include "unfused_passes-inl.h"
}  // namespace

void FillUnfusedBaseline(UnfusedPasses& passes) noexcept { Fill(passes); }

}  // namespace ringkv::bench
