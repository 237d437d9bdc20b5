#include "ringkv/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <utility>

#include "attention_checks.h"
#include "context_access.h"
#include "kernel_args.h"
#include "kv_access.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

using detail::ByteRange;
using detail::CheckOut;
using detail::ConvertQuery;
using detail::Overlap;
using detail::QueryInPlace;
using detail::RangeOf;
using detail::RoundUp;

struct KvShape {
  std::int64_t heads, length, k_dim, v_dim;
};

// Where the keys come from: a cache's view (its block runs, written into the
// arena) or one caller segment (plain tensors).
struct KvSource {
  const KvView* view = nullptr;
  const kernels::KvSegment* single = nullptr;
};

void CheckQuery(const char* function, const Tensor& q, const KvShape& kv) {
  if (q.Rank() != 4) {
    throw ShapeError(fmt::format("[{}] q has rank {} (shape {}), expected 4 [B, Hq, L, D]",
                                 function, q.Rank(), q.GetShape()));
  }
  if (q.Dim(0) != 1) {
    throw ShapeError(
        fmt::format("[{}] q dim 0 (batch) is {}, but only B = 1 is supported", function, q.Dim(0)));
  }
  if (kv.length < 1) throw ShapeError(fmt::format("[{}] there are no keys to attend to", function));
  if (q.Dim(2) < 1) {
    throw ShapeError(fmt::format("[{}] q dim 2 (length) is {}, expected >= 1", function, q.Dim(2)));
  }
  detail::CheckQueryHeads(function, q, kv.heads, kv.k_dim);
}

// The mask as the kernel takes it; `mask_array` keeps a materialised one alive.
kernels::MaskSpec KernelMask(const char* function, const AttentionMask& mask, std::int64_t heads,
                             std::int64_t length, std::int64_t keys, std::int64_t first_position,
                             Tensor& mask_array) {
  kernels::MaskSpec spec;
  if (mask.HasArray() || mask.IsRelaxed()) {
    mask_array = mask.AsArray(length, keys, first_position);  // [1, 1 or H, L, K]
    if (mask_array.Dim(1) != 1 && mask_array.Dim(1) != heads) {
      throw ShapeError(fmt::format("[{}] mask dim 1 (heads) is {}, expected 1 or {}", function,
                                   mask_array.Dim(1), heads));
    }
    spec.kind = kernels::MaskKind::kAdditive;
    spec.data = mask_array.Data();
    spec.strides = {0, mask_array.Dim(1) == 1 ? 0 : length * keys, keys, 1};
    return spec;
  }
  switch (mask.StructuralKind()) {
    case AttentionMask::Kind::kNone:
      break;
    case AttentionMask::Kind::kWindow:
      spec.kind = kernels::MaskKind::kWindow;
      spec.window = mask.Window();
      break;
    case AttentionMask::Kind::kCausal:
    case AttentionMask::Kind::kSlidingWindow:
      if (length > keys) {
        throw ShapeError(fmt::format("[{}] a causal mask needs L <= K, but L is {} and K is {}",
                                     function, length, keys));
      }
      spec.kind = mask.StructuralKind() == AttentionMask::Kind::kCausal
                      ? kernels::MaskKind::kCausal
                      : kernels::MaskKind::kSlidingWindow;
      spec.window = mask.Window();
      break;
  }
  return spec;
}

// first_position: the absolute position of the oldest key, for relaxed cells.
void Run(const char* function, const Tensor& q, const KvShape& kv, KvSource source,
         const AttentionMask& mask, float scale, std::int64_t first_position, Context& ctx,
         Tensor& out) {
  CheckQuery(function, q, kv);
  const std::int64_t heads = q.Dim(1), length = q.Dim(2);
  Tensor mask_array;  // keeps a materialised mask alive for the call
  kernels::SdpaParams params;
  params.mask = KernelMask(function, mask, heads, length, kv.length, first_position, mask_array);
  CheckOut(function, out, q, kv.v_dim);
  if (Overlap(RangeOf(out), RangeOf(mask_array))) {
    throw ShapeError(fmt::format("[{}] out (shape {}) overlaps the mask array in memory", function,
                                 out.GetShape()));
  }

  // The arena: [segments | q as f32, when converted | Sdpa's workspace].
  const kernels::KernelTable& table = detail::ContextAccess::Kernels(ctx);
  kernels::Executor& executor = detail::ContextAccess::Executor(ctx);
  const std::int64_t segments =
      source.view != nullptr ? detail::KvAccess::SegmentCount(*source.view) : 1;
  const bool convert_q = !QueryInPlace(q);
  kernels::SdpaShape shape;
  shape.batch = 1;
  shape.q_heads = heads;
  shape.kv_heads = kv.heads;
  shape.queries = length;
  shape.keys = kv.length;
  shape.key_dim = kv.k_dim;
  shape.value_dim = kv.v_dim;
  shape.segments = segments;
  const DType key_dtype = source.view != nullptr ? source.view->KeyDtype() : source.single->k.dtype;
  shape.rotated_keys = key_dtype == DType::kI4H;
  shape.quantized = IsQuantized(key_dtype);
  const std::size_t segment_bytes =
      RoundUp(static_cast<std::size_t>(segments) * sizeof(kernels::KvSegment));
  const std::size_t q_bytes =
      convert_q ? RoundUp(static_cast<std::size_t>(q.NumElements()) * sizeof(float)) : 0;
  const std::size_t work_bytes = kernels::SdpaWorkspaceBytes(shape, executor.Concurrency());
  const std::unique_lock<std::mutex> arena_lock = detail::ContextAccess::Exclusive(ctx);
  const std::span<std::byte> arena =
      detail::ContextAccess::Arena(function, ctx, segment_bytes + q_bytes + work_bytes);

  auto* const segment_data = reinterpret_cast<kernels::KvSegment*>(arena.data());
  const std::span<kernels::KvSegment> kernel_segments(segment_data,
                                                      static_cast<std::size_t>(segments));
  if (source.view != nullptr) {
    std::uninitialized_default_construct(kernel_segments.begin(), kernel_segments.end());
    detail::KvAccess::KernelSegments(*source.view, kernel_segments);
  } else {
    std::uninitialized_copy_n(source.single, 1, kernel_segments.begin());
  }
  const ByteRange out_range = RangeOf(out);
  for (const kernels::KvSegment& seg : kernel_segments) {
    if (Overlap(out_range, RangeOf(seg.k)) || Overlap(out_range, RangeOf(seg.v))) {
      throw ShapeError(fmt::format("[{}] out (shape {}) overlaps the keys or values in memory",
                                   function, out.GetShape()));
    }
  }

  params.q = ToArrayRef(q);
  if (convert_q) {
    auto* const q_data = reinterpret_cast<float*>(arena.data() + segment_bytes);
    ConvertQuery(q, q_data, table);
    params.q.data = q_data;
    params.q.dtype = DType::kF32;
    params.q.strides = {heads * length * kv.k_dim, length * kv.k_dim, kv.k_dim, 1};
  }
  params.kv = kernel_segments;
  params.scale = scale;
  params.out = static_cast<float*>(out.MutableData());
  for (int axis = 0; axis < 4; ++axis) {
    params.out_strides[static_cast<std::size_t>(axis)] = out.Stride(axis);
  }
  // Sdpa writes every element in view (zeros for a row that sees no key).
  kernels::Sdpa(params, table, executor, arena.subspan(segment_bytes + q_bytes));
}

KvShape ShapeOfHistory(const KVHistory& history) {
  const KvView& kv = history.Kv();
  const KvShape shape{kv.Heads(), kv.Length(), kv.KeyDim(), kv.ValueDim()};
  if (shape.length < 1) throw ShapeError("[Attention] the history holds no keys");
  return shape;
}

struct PlainKv {
  Tensor keys, values;  // unit inner stride
  KvShape shape;
};

PlainKv CheckPlainKv(const Tensor& k, const Tensor& v) {
  constexpr const char* kFn = "ScaledDotProductAttention";
  if (k.Rank() != 4 || v.Rank() != 4) {
    throw ShapeError(fmt::format("[{}] k shape {} and v shape {} must both be rank 4", kFn,
                                 k.GetShape(), v.GetShape()));
  }
  if (k.Dtype() != v.Dtype()) {
    throw ShapeError(fmt::format("[{}] k dtype {} != v dtype {}", kFn, k.Dtype(), v.Dtype()));
  }
  if (k.Dim(0) != 1 || v.Dim(0) != 1 || k.Dim(1) != v.Dim(1) || k.Dim(2) != v.Dim(2)) {
    throw ShapeError(
        fmt::format("[{}] k shape {} and v shape {} must be [1, Hkv, T, D] and "
                    "[1, Hkv, T, Dv]",
                    kFn, k.GetShape(), v.GetShape()));
  }
  if (k.Dim(1) < 1 || k.Dim(3) < 1 || v.Dim(3) < 1) {
    throw ShapeError(fmt::format("[{}] k shape {} / v shape {} has an empty axis", kFn,
                                 k.GetShape(), v.GetShape()));
  }
  // The kernels walk the head dim contiguously.
  return {k.Stride(3) == 1 ? k : k.Contiguous(), v.Stride(3) == 1 ? v : v.Contiguous(),
          KvShape{k.Dim(1), k.Dim(2), k.Dim(3), v.Dim(3)}};
}

}  // namespace

void Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
               float scale, Context& ctx, Tensor& out) {
  const KvShape shape = ShapeOfHistory(history);
  const AttentionMask mask =
      detail::KvAccess::ApplyMask(history, logical_mask, detail::ContextAccess::Kernels(ctx));
  Run("Attention", q, shape, KvSource{&history.Kv(), nullptr}, mask, scale,
      detail::KvAccess::Applier(history).first_position, ctx, out);
}

Tensor Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
                 float scale, Context& ctx) {
  const KvShape shape = ShapeOfHistory(history);
  CheckQuery("Attention", q, shape);
  Tensor out = Tensor::Uninitialized(DType::kF32, {1, q.Dim(1), q.Dim(2), shape.v_dim});
  Attention(q, history, logical_mask, scale, ctx, out);
  return out;
}

void ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttentionMask& mask, float scale, Context& ctx, Tensor& out) {
  const PlainKv kv = CheckPlainKv(k, v);
  const kernels::KvSegment segment{ToArrayRef(kv.keys), ToArrayRef(kv.values)};
  Run("ScaledDotProductAttention", q, kv.shape, KvSource{nullptr, &segment}, mask, scale,
      /*first_position=*/0, ctx, out);
}

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionMask& mask, float scale, Context& ctx) {
  const PlainKv kv = CheckPlainKv(k, v);
  CheckQuery("ScaledDotProductAttention", q, kv.shape);
  Tensor out = Tensor::Uninitialized(DType::kF32, {1, q.Dim(1), q.Dim(2), kv.shape.v_dim});
  const kernels::KvSegment segment{ToArrayRef(kv.keys), ToArrayRef(kv.values)};
  Run("ScaledDotProductAttention", q, kv.shape, KvSource{nullptr, &segment}, mask, scale,
      /*first_position=*/0, ctx, out);
  return out;
}

}  // namespace ringkv
