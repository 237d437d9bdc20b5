#pragma once
// Validation of the keys and values handed to an Update, shared by every cache.

#include <cstdint>
#include <optional>

#include "block_store.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// Checks keys [1, Hkv, L, D] and values [1, Hkv, L, Dv] (rank, B == 1, matching
// heads/length, L >= 1) and, when `established` is set, that they match the
// layout the cache already holds. Without a storage dtype keys and values must
// share a dtype, which becomes the layout's; with one, each may be any dtype
// (the write converts) and the layout holds storage_dtype. Throws
// ringkv::ShapeError prefixed with [function]; returns the layout to store.
KvLayout CheckKvInput(const char* function, const Tensor& keys, const Tensor& values,
                      const KvLayout* established,
                      std::optional<DType> storage_dtype = std::nullopt);

// Throws ringkv::SnapshotError when a cache built with a storage dtype is given a
// snapshot of another dtype (its blocks would not hold the storage dtype).
void CheckSnapshotDtype(const char* function, const BlockStore& snapshot,
                        std::optional<DType> storage_dtype);

// The storage dtype a cache constructor was given; throws ringkv::Error for a
// value outside the enum.
std::optional<DType> CheckStorageDtype(const char* function, std::optional<DType> storage_dtype);

// Throws ringkv::Error unless target >= 0.
void CheckTarget(const char* function, int target);

// offset + length, or ringkv::Error when that passes INT_MAX (offsets are ints;
// an imported snapshot can start near the limit). length >= 0.
int AdvancedOffset(const char* function, int offset, std::int64_t length);

}  // namespace ringkv::detail
