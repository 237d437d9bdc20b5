// The unfused attention passes (unfused_passes.h) built with the avx512 flags (CMakeLists.txt).
#include "unfused_passes.h"

namespace ringkv::bench {
namespace {
#include "unfused_passes-inl.h"
}  // namespace

void FillUnfusedAvx512(UnfusedPasses& passes) noexcept { Fill(passes); }

}  // namespace ringkv::bench
