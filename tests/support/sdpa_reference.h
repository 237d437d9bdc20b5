#pragma once
// The float64 reference SDPA: the test oracle every tier, the plain scalar one
// included, is compared with. Test support only: it is not part of the kernels
// library (tests/support/check_no_oracle.cmake keeps it that way). Deliberately
// simple: one row at a time, a full softmax over all T keys in double, masks
// evaluated by their definition.

#include <vector>

#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/sdpa.h"

namespace ringkv::test {

// out = softmax(scale * Q K^T + mask) V in double, returned densely as
// [B, Hq, L, Dv] (params.out is not touched). The rule for NaN and Inf
// (docs/kernels.md) by its definition: a key with a -inf logit (hidden by the
// mask, or -inf from its data) is skipped, its K and V never read into the
// result; the max over the other logits is NaN if any of them is NaN; then
// IEEE arithmetic (so +inf - +inf = NaN). A row with no key left is 0.
std::vector<double> ReferenceSdpa(const kernels::SdpaParams& params);

// The same over the queries a kernel table with attend_rounds_bf16_queries
// (kernel_table.h) uses: each q rounded to bf16 (nearest even; subnormals to
// zero, NaN quiet, as vcvtneps2bf16 does).
std::vector<double> ReferenceSdpaOverBf16Queries(const kernels::SdpaParams& params);

// The queries tier `tier` attends K stored as `k_dtype` with, for oracles that
// read q themselves: each rounded to bf16 as ReferenceSdpaOverBf16Queries rounds
// it where the tier rounds those of bf16 K (kernels::RoundsBf16Queries), q as
// given otherwise.
std::vector<float> QueriesAsAttended(std::vector<float> q, DType k_dtype, kernels::Isa tier);

// The reference for what `table` computes: over bf16 queries where it rounds
// those of bf16 K (ReferenceSdpaOverBf16Queries), over the given ones otherwise.
std::vector<double> ReferenceSdpaFor(const kernels::SdpaParams& params,
                                     const kernels::KernelTable& table);

}  // namespace ringkv::test
