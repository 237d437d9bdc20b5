#pragma once
// The float64 reference SDPA: the test oracle every tier, the plain scalar one
// included, is compared with. Test support only: it is not part of the kernels
// library (tests/support/check_no_oracle.cmake keeps it that way). Deliberately simple: one row at
// a time, a full softmax over all T keys in double, masks evaluated by their definition.

#include <vector>

#include "ringkv/kernels/sdpa.h"

namespace ringkv::test {

// out = softmax(scale * Q K^T + mask) V in double, returned densely as
// [B, Hq, L, Dv] (params.out is not touched). A row whose keys are all masked is 0.
std::vector<double> ReferenceSdpa(const kernels::SdpaParams& params);

}  // namespace ringkv::test
