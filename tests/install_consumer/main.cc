// A user of the installed package, written like the README's example: caches per
// layer, attention over their history, a snapshot and a restore. Uses only the
// installed headers and ringkv::core.
#include <cmath>
#include <cstdio>
#include <vector>

#include "ringkv/ringkv.h"  // the umbrella header: every public header must install

int main() {
  constexpr std::int64_t kHq = 4, kHkv = 2, kD = 8;
  ringkv::Context ctx(/*threads=*/2);
  ringkv::LayerCaches caches = ringkv::LayerCaches::Interleaved(2, 2, 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));

  float checksum = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<float> qv(kHq * kD), kv(kHkv * kD);
    for (std::size_t i = 0; i < qv.size(); ++i) qv[i] = std::sin(static_cast<float>(i + step));
    for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = std::cos(static_cast<float>(i * step));
    const auto q = ringkv::Tensor::FromVector(qv, {1, kHq, 1, kD});
    const auto k = ringkv::Tensor::FromVector(kv, {1, kHkv, 1, kD}, ringkv::DType::kF16);
    for (std::size_t layer = 0; layer < caches.Size(); ++layer) {
      ringkv::KVHistory history = caches[layer].Update(k, k);
      const ringkv::Tensor out =
          ringkv::Attention(q, history, ringkv::AttentionMask::Causal(), scale, ctx);
      for (float x : out.ToVector()) checksum += x;
    }
  }
  const int turn_end = caches.Offsets().front();
  std::unique_ptr<ringkv::LayerSnapshot> turn = caches.Snapshot(0);
  const bool restored = caches.Restore(turn.get(), turn_end);
  std::printf("%s on %s, offset %d, checksum %g\n",
              fmt::format("{}", caches[0].State().ConcatKeys()).c_str(),
              std::string(ringkv::kernels::IsaName(ctx.Tier())).c_str(), turn_end,
              static_cast<double>(checksum));
  if (!restored || turn_end != 6 || !std::isfinite(checksum)) return 1;
  std::printf("ringkv consumer ok\n");
  return 0;
}
