#include "ringkv/attention.h"

#include <fmt/format.h>

#include <span>
#include <vector>

#include "kernel_args.h"
#include "ringkv/error.h"
#include "ringkv/format.h"

namespace ringkv {
namespace {

struct KvShape {
  std::int64_t heads, length, k_dim, v_dim;
};

// Validates q against the keys; returns q as f32 with a unit inner stride.
Tensor CheckQuery(const char* function, const Tensor& q, const KvShape& kv) {
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
  if (q.Dim(3) != kv.k_dim) {
    throw ShapeError(fmt::format("[{}] q dim 3 (head dim) is {}, but the keys have {}", function,
                                 q.Dim(3), kv.k_dim));
  }
  if (q.Dim(1) < 1 || q.Dim(1) % kv.heads != 0) {
    throw ShapeError(fmt::format("[{}] q dim 1 (heads) is {}, not a multiple of {} kv heads",
                                 function, q.Dim(1), kv.heads));
  }
  if (q.Dtype() == DType::kF32 && (q.Stride(3) == 1 || q.Dim(3) == 1)) return q;
  return q.AsType(DType::kF32);
}

// first_position: the absolute position of the oldest key, for relaxed cells.
Tensor Run(const char* function, const Tensor& q, const KvShape& kv,
           std::span<const kernels::KvSegment> segments, const AttentionMask& mask, float scale,
           std::int64_t first_position, Context& ctx) {
  const Tensor query = CheckQuery(function, q, kv);
  const std::int64_t heads = q.Dim(1), length = q.Dim(2);
  kernels::SdpaParams params;
  params.q = ToArrayRef(query);
  params.kv = segments;
  params.scale = scale;
  Tensor mask_array;  // keeps a materialised mask alive for the call
  if (mask.HasArray() || mask.IsRelaxed()) {
    mask_array = mask.AsArray(length, kv.length, first_position);  // [1, 1 or H, L, K]
    if (mask_array.Dim(1) != 1 && mask_array.Dim(1) != heads) {
      throw ShapeError(fmt::format("[{}] mask dim 1 (heads) is {}, expected 1 or {}", function,
                                   mask_array.Dim(1), heads));
    }
    params.mask.kind = kernels::MaskKind::kAdditive;
    params.mask.data = mask_array.Data();
    params.mask.strides = {0, mask_array.Dim(1) == 1 ? 0 : length * kv.length, kv.length, 1};
  } else {
    switch (mask.StructuralKind()) {
      case AttentionMask::Kind::kNone:
        break;
      case AttentionMask::Kind::kWindow:
        params.mask.kind = kernels::MaskKind::kWindow;
        params.mask.window = mask.Window();
        break;
      case AttentionMask::Kind::kCausal:
      case AttentionMask::Kind::kSlidingWindow:
        if (length > kv.length) {
          throw ShapeError(fmt::format("[{}] a causal mask needs L <= K, but L is {} and K is {}",
                                       function, length, kv.length));
        }
        params.mask.kind = mask.StructuralKind() == AttentionMask::Kind::kCausal
                               ? kernels::MaskKind::kCausal
                               : kernels::MaskKind::kSlidingWindow;
        params.mask.window = mask.Window();
        break;
    }
  }
  // Sdpa writes every element (zeros for a row that sees no key): no fill needed.
  Tensor out = Tensor::Uninitialized(DType::kF32, {1, heads, length, kv.v_dim});
  params.out = static_cast<float*>(out.MutableData());
  params.out_strides = {heads * length * kv.v_dim, length * kv.v_dim, kv.v_dim, 1};
  kernels::Sdpa(params, ctx.Kernels(), ctx.Pool());
  return out;
}

}  // namespace

Tensor Attention(const Tensor& q, const KVHistory& history, const AttentionMask& logical_mask,
                 float scale, Context& ctx) {
  const KvView& kv = history.Kv();
  const KvShape shape{kv.Heads(), kv.Length(), kv.KeyDim(), kv.ValueDim()};
  if (shape.length < 1) throw ShapeError("[Attention] the history holds no keys");
  const AttentionMask mask = history.ApplyMask(logical_mask, ctx.Kernels());
  const std::vector<kernels::KvSegment> segments = kv.KernelSegments();
  return Run("Attention", q, shape, segments, mask, scale, history.Applier().first_position, ctx);
}

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionMask& mask, float scale, Context& ctx) {
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
  const Tensor keys = k.Stride(3) == 1 ? k : k.Contiguous();
  const Tensor values = v.Stride(3) == 1 ? v : v.Contiguous();
  const kernels::KvSegment segment{ToArrayRef(keys), ToArrayRef(values)};
  const KvShape shape{k.Dim(1), k.Dim(2), k.Dim(3), v.Dim(3)};
  return Run(kFn, q, shape, std::span<const kernels::KvSegment>(&segment, 1), mask, scale,
             /*first_position=*/0, ctx);
}

}  // namespace ringkv
