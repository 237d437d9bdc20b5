// The unfused attention passes (unfused_passes.h) built with the avx2 flags (CMakeLists.txt).
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {
#include "unfused_passes-inl.h"
}  // namespace

void FillUnfusedAvx2(UnfusedPasses& passes) noexcept { Fill(passes); }

}  // namespace ringkv::bench
