#pragma once
// The dtypes a cache's storage blocks hold keys and values in.

#include "ringkv/dtype.h"

namespace ringkv {

// keys / values: f32, f16 or bf16 (the same one for both), or quantized (int8 /
// int4, kernels/ringkv/kernels/dtype.h; the two may then differ, e.g. int8 keys
// and int4 values). A float side with a quantized other side is refused: the
// attention kernels read K and V either both as floats of one dtype or both
// quantized. int4 needs a head dim that is a multiple of 32 (checked at the
// first Update). docs/caches.md, "Quantized storage".
struct KvStorage {
  DType keys = DType::kF32;
  DType values = DType::kF32;

  static constexpr KvStorage Same(DType dtype) noexcept { return {dtype, dtype}; }
  friend bool operator==(const KvStorage&, const KvStorage&) = default;
};

}  // namespace ringkv
