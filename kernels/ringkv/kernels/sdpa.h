#pragma once
// Scaled-dot-product attention over raw strided arrays:
//   out = softmax(scale * Q K^T + mask) V
// Q [B, Hq, L, D] f32, K [B, Hkv, T, D], V [B, Hkv, T, Dv] read as stored, out
// [B, Hq, L, Dv] f32. K and V are f32/f16/bf16 (the same dtype), or quantized
// (kI8 / kI4 / kI4H, dtype.h; K and V may then differ): a quantized array's shape counts
// values, its strides count bytes, its last stride is 1 and each row of D (Dv)
// values is RowBytes(dtype, D) bytes with its scales; the kernels fold the scales
// into the scores and the softmax weights instead of dequantizing, and for kI4H
// rotate the query rows (K) or the output rows (V) instead of the stored rows. K and V may be split
// along T into segments (a paged cache hands over its blocks in place, without gathering them). Hq
// is a multiple of Hkv: query head h reads kv head h / (Hq / Hkv). The kernels know nothing about
// caches or tensors; lib/ validates user input and fills these structs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ringkv/kernels/dtype.h"
#include "ringkv/kernels/executor.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv::kernels {

// A read-only 4-D array: element strides, so views into larger buffers work.
struct ArrayRef {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> strides{};  // in elements
};

// Query i of L sits at absolute position p = T - L + i; key t at position t.
enum class MaskKind : std::uint8_t {
  kNone,
  // Keys at positions <= p.
  kCausal,
  // Keys at positions > p - window, later keys included (no causality): the
  // window only hides keys that are too old.
  kWindow,
  // Both: keys in (p - window, p], i.e. the query itself and window - 1 earlier tokens.
  kSlidingWindow,
  // Added to the scaled logits; f32, broadcast to [B, Hq, L, T] through strides
  // (a stride of 0 broadcasts that axis). -inf masks a key out.
  kAdditive,
  // uint8, nonzero = the key is visible; broadcast like kAdditive.
  kBoolean,
};

struct MaskSpec {
  MaskKind kind = MaskKind::kNone;
  std::int64_t window = 0;                // kWindow / kSlidingWindow only, >= 1
  const void* data = nullptr;             // kAdditive / kBoolean only
  std::array<std::int64_t, 4> strides{};  // over [B, Hq, L, T], in elements
};

// One run of consecutive keys: k [B, Hkv, Ti, D] and v [B, Hkv, Ti, Dv].
struct KvSegment {
  ArrayRef k;
  ArrayRef v;
};

struct SdpaParams {
  ArrayRef q;  // [B, Hq, L, D], f32
  // The keys in order: key t of segment j has index T_0 + ... + T_{j-1} + t, and
  // T is the sum of the T_i. Every segment has the same K dtype, V dtype, B, Hkv,
  // D and Dv.
  std::span<const KvSegment> kv;
  float* out = nullptr;                       // [B, Hq, L, Dv], f32
  std::array<std::int64_t, 4> out_strides{};  // in elements
  float scale = 1.0f;
  MaskSpec mask;
};

// The sizes a call's scratch depends on.
struct SdpaShape {
  std::int64_t batch = 0;      // B
  std::int64_t q_heads = 0;    // Hq
  std::int64_t kv_heads = 0;   // Hkv
  std::int64_t queries = 0;    // L
  std::int64_t keys = 0;       // T, over every segment
  std::int64_t key_dim = 0;    // D
  std::int64_t value_dim = 0;  // Dv
  std::int64_t segments = 0;
  bool rotated_keys = false;  // K is kI4H (the query rows are rotated in scratch)
  bool quantized = false;     // K and V quantized (prefill tiles dequantize blocks in scratch)
};

// The shape of `params` (reads shapes only, never data).
SdpaShape ShapeOf(const SdpaParams& params) noexcept;

// Whether tier `isa` attends quantized K or V in decode-sized tiles (fewer than
// 32 query rows per kv head and task) with int16 multiply-adds: it rounds the
// queries (K) and the softmax weights (V; per scale group for int4) to int16, at
// 2^-16 of each row's largest, for about twice the multiply-adds an f32 FMA does.
// The scalar tier computes in f32 throughout. docs/quantized_kv.md has the
// error this adds.
bool RoundsQuantizedToInt16(Isa isa) noexcept;

// Whether tier `isa`, on this CPU, attends bf16 K with the queries rounded to
// bf16 (KernelTable::attend_rounds_bf16_queries): the AVX-512 tier where the
// CPU has AVX512-BF16, whose bf16 decode scores take bf16 dot products. Queries
// that are bf16 values already lose nothing; docs/kernels.md has what the
// rounding costs f32 ones.
bool RoundsBf16Queries(Isa isa) noexcept;

// Whether tier `isa`, on this CPU, weighs bf16 V with the softmax weights
// rounded to bf16 (KernelTable::attend_rounds_bf16_weights): where
// RoundsBf16Queries is true, so that decode adds V in bf16 dot products. Each
// weight's relative error is then at most 2^-8; docs/kernels.md has the cost.
bool RoundsBf16Weights(Isa isa) noexcept;

// Bytes of scratch one Sdpa call of `shape` needs on an executor whose
// Concurrency() is `concurrency`; the caller provides them, aligned to
// kSdpaWorkspaceAlignment, so Sdpa itself never allocates.
std::size_t SdpaWorkspaceBytes(const SdpaShape& shape, int concurrency) noexcept;
inline constexpr std::size_t kSdpaWorkspaceAlignment = 64;

// Runs on `executor` with the kernels of `table`, its scratch carved from
// `workspace` (at least SdpaWorkspaceBytes(ShapeOf(params), executor.Concurrency())
// bytes, aligned to kSdpaWorkspaceAlignment; its contents on entry do not matter).
// Parameters must be consistent (checked with GSL Expects; lib/ validates user
// input before calling). A row whose keys are all masked yields zeros. Allocates
// nothing. Calls on different workspaces and outputs may run at the same time,
// also on one executor if it accepts concurrent Run calls.
void Sdpa(const SdpaParams& params, const KernelTable& table, Executor& executor,
          std::span<std::byte> workspace) noexcept;

}  // namespace ringkv::kernels
