// See sdpa_reference.h. Not tuned: clarity is the point, except that each stored
// K/V row is decoded once per call (DecodedRows).
#include "support/sdpa_reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "support/hadamard_reference.h"

namespace ringkv::test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

using kernels::ArrayRef;
using kernels::KvSegment;
using kernels::MaskKind;
using kernels::MaskSpec;
using kernels::SdpaParams;

// Stored value i3 of a quantized row (dtype.h): row + data, then the f32 scales.
double StoredElement(DType dtype, const std::uint8_t* row, std::int64_t n, std::int64_t i3) {
  float scale = 0.0f;
  int q = 0;
  if (dtype == DType::kI8) {
    std::memcpy(&scale, row + n, sizeof scale);
    q = static_cast<std::int8_t>(row[i3]);
  } else {
    std::memcpy(&scale, row + n / 2 + i3 / kI4Group * 4, sizeof scale);
    const int nibble = i3 % 2 == 0 ? row[i3 / 2] & 0xF : row[i3 / 2] >> 4;
    q = nibble >= 8 ? nibble - 16 : nibble;
  }
  return static_cast<double>(scale) * q;
}

// Value i3 of a quantized row; for kI4H, by the definition in dtype.h: the
// stored values of its block rotated back, sum_j H_b(i, j) y_j / sqrt(b) with
// i = i3's index in the block and H_b(i, j) = (-1)^popcount(i & j).
double QuantizedElement(const ArrayRef& a, std::int64_t i0, std::int64_t i1, std::int64_t i2,
                        std::int64_t i3) {
  const auto* row = static_cast<const std::uint8_t*>(a.data) + i0 * a.strides[0] +
                    i1 * a.strides[1] + i2 * a.strides[2];
  const std::int64_t n = a.shape[3];
  if (a.dtype != DType::kI4H) return StoredElement(a.dtype, row, n, i3);
  const std::int64_t b = I4HBlock(n);
  const std::int64_t first = i3 / b * b;
  double sum = 0.0;
  for (std::int64_t j = 0; j < b; ++j) {
    sum += HadamardSign(i3 - first, j) * StoredElement(DType::kI4, row, n, first + j);
  }
  return sum / std::sqrt(static_cast<double>(b));
}

double Element(const ArrayRef& a, std::int64_t i0, std::int64_t i1, std::int64_t i2,
               std::int64_t i3) {
  if (IsQuantized(a.dtype)) return QuantizedElement(a, i0, i1, i2, i3);
  const std::int64_t off =
      i0 * a.strides[0] + i1 * a.strides[1] + i2 * a.strides[2] + i3 * a.strides[3];
  switch (a.dtype) {
    case DType::kF32:
      return static_cast<double>(static_cast<const float*>(a.data)[off]);
    case DType::kF16:
      return static_cast<double>(F16ToF32(static_cast<const std::uint16_t*>(a.data)[off]));
    case DType::kBF16:
      return static_cast<double>(BF16ToF32(static_cast<const std::uint16_t*>(a.data)[off]));
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;  // QuantizedElement
  }
  return 0.0;
}

// The mask term of (b, h, i, t): 0 visible, -inf hidden, or the additive value.
double MaskTerm(const MaskSpec& mask, std::int64_t b, std::int64_t h, std::int64_t i,
                std::int64_t t, std::int64_t seq_l, std::int64_t seq_t) {
  constexpr double kHidden = -std::numeric_limits<double>::infinity();
  const std::int64_t pos = seq_t - seq_l + i;
  const std::int64_t off =
      b * mask.strides[0] + h * mask.strides[1] + i * mask.strides[2] + t * mask.strides[3];
  switch (mask.kind) {
    case MaskKind::kNone:
      return 0.0;
    case MaskKind::kCausal:
      return t <= pos ? 0.0 : kHidden;
    case MaskKind::kWindow:
      return t > pos - mask.window ? 0.0 : kHidden;
    case MaskKind::kSlidingWindow:
      return t <= pos && t > pos - mask.window ? 0.0 : kHidden;
    case MaskKind::kAdditive:
      return static_cast<double>(static_cast<const float*>(mask.data)[off]);
    case MaskKind::kBoolean:
      return static_cast<const std::uint8_t*>(mask.data)[off] != 0 ? 0.0 : kHidden;
  }
  return 0.0;
}

// The rows of one array at (batch b, head h) in float64, each decoded the first
// time a visible logit asks for it. Decoding once per call rather than once per
// query row keeps the oracle affordable under the sanitizers and emulation
// (a kI4H element sums over its whole block); decoding on demand keeps the rule
// that a row no visible logit needs is never read.
class DecodedRows {
 public:
  DecodedRows(const ArrayRef& a, std::int64_t b, std::int64_t h)
      : a_(a),
        b_(b),
        h_(h),
        n_(a.shape[3]),
        values_(static_cast<std::size_t>(a.shape[2] * a.shape[3])),
        decoded_(static_cast<std::size_t>(a.shape[2]), false) {}

  const double* Row(std::int64_t j) {
    double* row = values_.data() + j * n_;
    if (!decoded_[static_cast<std::size_t>(j)]) {
      for (std::int64_t c = 0; c < n_; ++c) row[c] = Element(a_, b_, h_, j, c);
      decoded_[static_cast<std::size_t>(j)] = true;
    }
    return row;
  }

 private:
  const ArrayRef& a_;
  std::int64_t b_, h_, n_;
  std::vector<double> values_;
  std::vector<bool> decoded_;
};

// x rounded to bf16 by its definition, kept as f32: subnormals become a zero
// of their sign, NaN keeps its top bits and is made quiet, Inf stays, every other
// value goes to the nearest multiple of its 2^-7 ulp, ties to even.
float RoundedToBf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint32_t exponent = bits & 0x7F800000u;
  if (exponent == 0) {
    bits &= 0x80000000u;
  } else if (exponent == 0x7F800000u) {
    if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0xFFFF0000u) | 0x00400000u;
  } else {
    const std::uint32_t lsb = (bits >> 16) & 1u;
    bits = (bits + 0x7FFFu + lsb) & 0xFFFF0000u;
  }
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

enum class Queries { kAsGiven, kBf16 };

std::vector<double> Reference(const SdpaParams& params, Queries queries) {
  const ArrayRef& q = params.q;
  const std::int64_t batch = q.shape[0];
  const std::int64_t hq = q.shape[1];
  const std::int64_t seq_l = q.shape[2];
  const std::int64_t d = q.shape[3];
  const std::int64_t hkv = params.kv.front().k.shape[1];
  const std::int64_t group = hq / hkv;
  const std::int64_t dv = params.kv.front().v.shape[3];
  std::int64_t seq_t = 0;
  for (const KvSegment& seg : params.kv) seq_t += seg.k.shape[2];

  std::vector<double> out(static_cast<std::size_t>(batch * hq * seq_l * dv), 0.0);
  std::vector<double> logits(static_cast<std::size_t>(seq_t));
  std::vector<double> q_row(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t kvh = 0; kvh < hkv; ++kvh) {
      std::vector<DecodedRows> keys, values;
      for (const KvSegment& seg : params.kv) {
        keys.emplace_back(seg.k, b, kvh);
        values.emplace_back(seg.v, b, kvh);
      }
      for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (std::int64_t i = 0; i < seq_l; ++i) {
          for (std::int64_t c = 0; c < d; ++c) {
            double& qc = q_row[static_cast<std::size_t>(c)];
            qc = Element(q, b, h, i, c);
            if (queries == Queries::kBf16) qc = RoundedToBf16(static_cast<float>(qc));
          }
          // The max over the keys the row sees; NaN as soon as one logit is NaN
          // (a plain `>` would skip it).
          double max_logit = kNegInf;
          std::int64_t t = 0;
          for (std::size_t s = 0; s < params.kv.size(); ++s) {
            for (std::int64_t j = 0; j < params.kv[s].k.shape[2]; ++j, ++t) {
              double& logit = logits[static_cast<std::size_t>(t)];
              const double bias = MaskTerm(params.mask, b, h, i, t, seq_l, seq_t);
              if (bias == kNegInf) {  // hidden: K is not even read
                logit = kNegInf;
                continue;
              }
              const double* k = keys[s].Row(j);
              double dot = 0.0;
              for (std::int64_t c = 0; c < d; ++c) dot += q_row[static_cast<std::size_t>(c)] * k[c];
              logit = static_cast<double>(params.scale) * dot + bias;
              if (std::isnan(logit) || logit > max_logit) max_logit = logit;
            }
          }
          double* o = out.data() + ((b * hq + h) * seq_l + i) * dv;
          if (max_logit == kNegInf) continue;  // no key visible: 0
          double sum = 0.0;
          t = 0;
          for (std::size_t s = 0; s < params.kv.size(); ++s) {
            for (std::int64_t j = 0; j < params.kv[s].k.shape[2]; ++j, ++t) {
              const double logit = logits[static_cast<std::size_t>(t)];
              if (logit == kNegInf) continue;  // weight 0, and V is not read
              const double p = std::exp(logit - max_logit);
              sum += p;
              const double* v = values[s].Row(j);
              for (std::int64_t c = 0; c < dv; ++c) o[c] += p * v[c];
            }
          }
          for (std::int64_t c = 0; c < dv; ++c) o[c] /= sum;
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> ReferenceSdpa(const SdpaParams& params) {
  return Reference(params, Queries::kAsGiven);
}

std::vector<double> ReferenceSdpaOverBf16Queries(const SdpaParams& params) {
  return Reference(params, Queries::kBf16);
}

std::vector<float> QueriesAsAttended(std::vector<float> q, DType k_dtype, kernels::Isa tier) {
  if (k_dtype == DType::kBF16 && kernels::RoundsBf16Queries(tier)) {
    for (float& x : q) x = RoundedToBf16(x);
  }
  return q;
}

std::vector<double> ReferenceSdpaFor(const SdpaParams& params, const kernels::KernelTable& table) {
  const bool rounded =
      params.kv.front().k.dtype == DType::kBF16 && table.attend_rounds_bf16_queries;
  return Reference(params, rounded ? Queries::kBf16 : Queries::kAsGiven);
}

}  // namespace ringkv::test
