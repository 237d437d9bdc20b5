#pragma once
// The float64 reference SDPA: the test oracle every tier, the plain scalar one
// included, is compared with. Test support only: it is not part of the kernels
// library (tests/support/check_no_oracle.cmake keeps it that way). Deliberately
// simple: one row at a time, a full softmax over all T keys in double, masks
// evaluated by their definition.

#include <vector>

#include "ringkv/kernels/sdpa.h"

namespace ringkv::test {

// out = softmax(scale * Q K^T + mask) V in double, returned densely as
// [B, Hq, L, Dv] (params.out is not touched). The rule for NaN and Inf
// (docs/kernels.md) by its definition: a key with a -inf logit (hidden by the
// mask, or -inf from its data) is skipped, its K and V never read into the
// result; the max over the other logits is NaN if any of them is NaN; then
// IEEE arithmetic (so +inf - +inf = NaN). A row with no key left is 0.
std::vector<double> ReferenceSdpa(const kernels::SdpaParams& params);

}  // namespace ringkv::test
