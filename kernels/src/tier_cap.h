#pragma once
// How a RINGKV_ISA value becomes a tier cap, apart from the environment, so that
// tests can feed it every kind of value in one process.
#include "ringkv/kernels/isa.h"

namespace ringkv::kernels::internal {

// `value` is what getenv("RINGKV_ISA") returned (nullptr when unset).
TierCapSetting ParseTierCap(const char* value);

}  // namespace ringkv::kernels::internal
