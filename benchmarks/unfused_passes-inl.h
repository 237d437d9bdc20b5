// The bodies of unfused_passes.h, included by each unfused_passes_<tier>.cc inside
// an anonymous namespace, so every unit keeps its own copies (internal linkage;
// tools/check_isa_linkage.sh explains why). No std:: inline helpers are called:
// one left out of line would be a weak symbol built with this unit's flags.
// Loops keep kLanes independent partial results so that the compiler vectorises
// them without reassociating a float sum; the units are built with
// -fno-trapping-math -fno-thread-jumps so that the exp's selects are if-converted
// and vectorised (checked with -fopt-info-vec on GCC 12).

constexpr std::size_t kLanes = 16;

void Scores(const float* q, std::size_t groups, const float* k, std::size_t n, std::size_t d,
            float scale, float* scores, std::size_t ld) noexcept {
  for (std::size_t j = 0; j < n; ++j) {
    const float* kj = k + j * d;
    for (std::size_t g = 0; g < groups; ++g) {
      const float* qg = q + g * d;
      float acc[kLanes] = {};
      for (std::size_t i = 0; i < d; i += kLanes) {
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += qg[i + l] * kj[i + l];
      }
      for (std::size_t w = kLanes / 2; w > 0; w /= 2) {  // a tree: short dependency chains
        for (std::size_t l = 0; l < w; ++l) acc[l] += acc[l + w];
      }
      scores[g * ld + j] = scale * acc[0];
    }
  }
}

// exp(x) for x <= 0 (softmax's s - max s), Cephes' expf: x = m ln2 + r, |r| <= ln2/2,
// a degree-7 polynomial for exp(r), 2^m through the exponent bits. Relative error
// about 2e-7; below -87 it returns exp(-87) instead of a denormal, which adds at
// most 1.6e-38 per key to a sum >= 1.
float ExpNonPositive(float x) noexcept {
  x = x < -87.0f ? -87.0f : x;
  const float fx = x * 1.44269504088896341f + 0.5f;
  auto m = static_cast<int>(fx);               // truncates toward zero ...
  m = static_cast<float>(m) > fx ? m - 1 : m;  // ... floor
  const auto mf = static_cast<float>(m);
  const float r = (x - mf * 0.693359375f) + mf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(float, (m + 127) << 23);
}

// Three passes over the row, as a softmax operator makes them: max, exp and sum, scale.
void Softmax(float* row, std::size_t n) noexcept {
  const std::size_t body = n - n % kLanes;
  // GCC vectorises no float max reduction without -ffinite-math-only, so this one
  // is written with a generic vector of the unit's native width.
#if defined(__AVX512F__)
  constexpr std::size_t kWidth = 16;
#elif defined(__AVX__)
  constexpr std::size_t kWidth = 8;
#else
  constexpr std::size_t kWidth = 4;
#endif
  using Vec = float __attribute__((vector_size(kWidth * sizeof(float))));
  Vec lanes_max = Vec{} + row[0];
  for (std::size_t j = 0; j < body; j += kWidth) {
    Vec x;
    __builtin_memcpy(&x, row + j, sizeof(x));
    lanes_max = x > lanes_max ? x : lanes_max;
  }
  float max = row[0];
  for (std::size_t l = 0; l < kWidth; ++l) max = lanes_max[l] > max ? lanes_max[l] : max;
  for (std::size_t j = body; j < n; ++j) max = row[j] > max ? row[j] : max;

  for (std::size_t j = 0; j < n; ++j) row[j] = ExpNonPositive(row[j] - max);
  float lanes[kLanes] = {};
  for (std::size_t j = 0; j < body; j += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] += row[j + l];
  }
  float sum = 0.0f;
  for (std::size_t l = 0; l < kLanes; ++l) sum += lanes[l];
  for (std::size_t j = body; j < n; ++j) sum += row[j];

  const float inv = 1.0f / sum;
  for (std::size_t j = 0; j < n; ++j) row[j] *= inv;
}

void WeightedSum(const float* p, std::size_t ld, std::size_t groups, const float* v, std::size_t n,
                 std::size_t d, float* out) noexcept {
  for (std::size_t j = 0; j < n; ++j) {
    const float* vj = v + j * d;
    for (std::size_t g = 0; g < groups; ++g) {
      const float w = p[g * ld + j];
      float* o = out + g * d;
      for (std::size_t i = 0; i < d; ++i) o[i] += w * vj[i];
    }
  }
}

void Fill(UnfusedPasses& passes) noexcept {
  passes.scores = Scores;
  passes.softmax = Softmax;
  passes.weighted_sum = WeightedSum;
}
