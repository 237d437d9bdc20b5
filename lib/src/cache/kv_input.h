#pragma once
// Validation of the keys and values handed to an Update, shared by every cache.

#include <cstdint>
#include <optional>

#include "block_store.h"
#include "ringkv/kv_storage.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

// Checks keys [1, Hkv, L, D] and values [1, Hkv, L, Dv] (rank, B == 1, matching
// heads/length, L >= 1) and, when `established` is set, that they match the
// layout the cache already holds. Without storage dtypes keys and values must
// share a dtype, which becomes the layout's; with them, each may be any float
// dtype (the write converts or quantizes) and the layout holds storage's. An
// int4 side needs its head dim to be a multiple of kI4Group. Throws
// ringkv::ShapeError prefixed with [function]; returns the layout to store.
KvLayout CheckKvInput(const char* function, const Tensor& keys, const Tensor& values,
                      const KvLayout* established, std::optional<KvStorage> storage = std::nullopt);

// Throws ringkv::SnapshotError when a cache built with storage dtypes is given a
// snapshot of other dtypes (its blocks would not hold the storage dtypes).
void CheckSnapshotDtype(const char* function, const BlockStore& snapshot,
                        std::optional<KvStorage> storage);

// The storage dtype a float-only cache constructor was given; throws
// ringkv::Error for a value that is not f32, f16 or bf16.
std::optional<DType> CheckStorageDtype(const char* function, std::optional<DType> storage_dtype);

// The storage dtypes a KVCache / RotatingKVCache constructor was given: each a
// storage dtype (dtype.h), both floats of one dtype or both quantized
// (kv_storage.h); else ringkv::Error naming the argument and values.
std::optional<KvStorage> CheckKvStorage(const char* function, std::optional<KvStorage> storage);

// One storage dtype for both sides (the single-dtype constructors).
inline std::optional<KvStorage> BothSides(std::optional<DType> dtype) noexcept {
  if (!dtype.has_value()) return std::nullopt;
  return KvStorage::Same(*dtype);
}

// Throws ringkv::Error unless target >= 0.
void CheckTarget(const char* function, int target);

// offset + length, or ringkv::Error when that passes INT_MAX (offsets are ints;
// an imported snapshot can start near the limit). length >= 0.
int AdvancedOffset(const char* function, int offset, std::int64_t length);

}  // namespace ringkv::detail
