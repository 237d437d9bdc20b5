// The process-wide tier cap (RINGKV_ISA). The style guide asks for explicit
// parameters over environment variables; this one exists because a whole
// process (a test binary, an embedding server) must be pinned to a tier without
// changing its code. To keep it from being hidden state it is read once, kept in
// an immutable function-local static, and shown by TierCap() and ringkv_cpuinfo.
#include "tier_cap.h"

#include <cstdio>
#include <cstdlib>

namespace ringkv::kernels {
namespace internal {

TierCapSetting ParseTierCap(const char* value) {
  TierCapSetting setting;
  // Empty counts as unset, as for most variables: `RINGKV_ISA= prog` clears it.
  if (value == nullptr || *value == '\0') return setting;
  setting.value = value;
  if (const std::optional<Isa> isa = IsaFromKey(setting.value)) {
    setting.cap = *isa;
  } else {
    // A typo must not silently mean "no cap": take the tier every CPU runs.
    setting.cap = Isa::kScalar;
    setting.valid = false;
  }
  return setting;
}

}  // namespace internal

const TierCapSetting& TierCap() noexcept {
  static const TierCapSetting setting = [] {
    // getenv is only unsafe against a concurrent setenv, which would be the
    // caller's own race; the static's initialisation is thread-safe.
    TierCapSetting parsed = internal::ParseTierCap(std::getenv("RINGKV_ISA"));
    if (!parsed.valid) {
      std::fprintf(stderr,
                   "ringkv: RINGKV_ISA=%s names no tier (scalar, sse42, avx2, avx512, neon): every "
                   "kernel runs the scalar tier and ringkv::Context refuses to start\n",
                   parsed.value.c_str());
    }
    return parsed;
  }();
  return setting;
}

}  // namespace ringkv::kernels
