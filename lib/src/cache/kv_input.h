#pragma once
// Validation of the keys and values handed to an Update, shared by every cache.

#include <cstdint>

#include "block_store.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// Checks keys [1, Hkv, L, D] and values [1, Hkv, L, Dv] (rank, B == 1, matching
// dtype/heads/length, L >= 1) and, when `established` is set, that they match the
// layout the cache already holds. Throws ringkv::ShapeError prefixed with
// [function]; returns the layout of the input.
KvLayout CheckKvInput(const char* function, const Tensor& keys, const Tensor& values,
                      const KvLayout* established);

// Throws ringkv::Error unless target >= 0.
void CheckTarget(const char* function, int target);

// offset + length, or ringkv::Error when that passes INT_MAX (offsets are ints;
// an imported snapshot can start near the limit). length >= 0.
int AdvancedOffset(const char* function, int offset, std::int64_t length);

}  // namespace ringkv::detail
