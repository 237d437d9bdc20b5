#include "demo_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "ringkv/format.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv::model {
namespace {

double Rate(const ForwardStats& s) {
  return s.total_seconds > 0 ? static_cast<double>(s.tokens) / s.total_seconds : 0;
}
double SdpaShare(const ForwardStats& s) {
  return s.total_seconds > 0 ? s.sdpa_seconds / s.total_seconds : 0;
}
std::string Bytes(std::size_t b) {
  const auto x = static_cast<double>(b);
  if (b >= (std::size_t{1} << 20)) return fmt::format("{:.2f} MiB", x / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", x / 1024);
  return fmt::format("{} B", b);
}
std::string Time(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}
std::string Phase(const ForwardStats& s) {
  return fmt::format(
      "{:5d} tokens {:>9}  {:8.1f} tok/s   SDPA {:4.1f} %, cache writes {:4.1f} %, rest {:4.1f} %",
      s.tokens, Time(s.total_seconds), Rate(s), 100 * SdpaShare(s),
      s.total_seconds > 0 ? 100 * s.cache_seconds / s.total_seconds : 0,
      s.total_seconds > 0 ? 100 * s.OtherSeconds() / s.total_seconds : 0);
}
std::string JsonPhase(const ForwardStats& s) {
  return fmt::format(
      R"({{"tokens": {}, "seconds": {:.6f}, "tokens_per_s": {:.3f}, "sdpa_seconds": {:.6f}, )"
      R"("cache_seconds": {:.6f}, "other_seconds": {:.6f}}})",
      s.tokens, s.total_seconds, Rate(s), s.sdpa_seconds, s.cache_seconds, s.OtherSeconds());
}

}  // namespace

std::size_t DemoReport::BytesPerToken() const {
  return static_cast<std::size_t>(config.kv_heads) * 2 * static_cast<std::size_t>(config.head_dim) *
         SizeOf(config.kv_dtype);
}

std::size_t DemoReport::SlidingBound() const {
  const int sliding = config.layers - config.GlobalLayers();
  const std::int64_t block = RotatingKVCache::kDefaultBlockTokens;
  const std::int64_t longest =
      std::max({turn1_prefill.tokens, turn2_prefill.tokens, std::int64_t{speculation.drafted}});
  const std::int64_t slots = (config.window + longest + block - 1) / block * block;
  return static_cast<std::size_t>(sliding) * static_cast<std::size_t>(slots) * BytesPerToken();
}

std::string ToText(const DemoReport& r) {
  const auto& s = r.speculation;
  const int sliding = r.config.layers - r.config.GlobalLayers();
  const int global = r.config.GlobalLayers();
  ForwardStats decode = r.turn1_decode;
  decode += r.turn2_decode;
  decode += r.long_decode;
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  line("ringkv decode demo: a tiny transformer with random weights on ringkv's caches");
  line(fmt::format("model    {}", r.config.Describe()));
  line(fmt::format("kernels  {} tier, {} threads", r.isa, r.threads));
  line("");
  line(fmt::format("turn 1   prefill {}", Phase(r.turn1_prefill)));
  line(fmt::format("         decode  {}", Phase(r.turn1_decode)));
  line(fmt::format(
      "         snapshot of {} tokens x {} layers: {} of K/V, taken in {} "
      "(shares blocks copy-on-write)",
      r.snapshot_tokens, r.config.layers, Bytes(r.snapshot_bytes), Time(r.snapshot_seconds)));
  const double warm = r.restore_seconds + r.turn2_prefill.total_seconds;
  line(fmt::format(
      "turn 2   restore the snapshot in {}, then prefill only the {} new tokens "
      "in {}",
      Time(r.restore_seconds), r.turn2_prefill.tokens, Time(r.turn2_prefill.total_seconds)));
  line(
      fmt::format("         cold prefill of the same {} tokens: {}  ->  prompt cache saves {} "
                  "({:.1f}x faster to the first token; logits agree to {:.1e})",
                  r.cold_tokens, Time(r.cold_prefill_seconds), Time(r.cold_prefill_seconds - warm),
                  warm > 0 ? r.cold_prefill_seconds / warm : 0, r.warm_vs_cold_diff));
  line(fmt::format("         decode  {}", Phase(r.turn2_decode)));
  line(
      fmt::format("speculate drafted {} tokens (token {} deliberately wrong), verified in one "
                  "forward ({}), accepted {}",
                  s.drafted, s.wrong_index, Time(s.verify_seconds), s.accepted));
  line(
      fmt::format("         offsets: before {}  |  during verify: global {}, sliding {}  |  "
                  "after Commit({}): {}{}",
                  s.offset_before, s.offset_during_global, s.offset_during_sliding, s.accepted,
                  s.offset_after_min,
                  s.offset_after_min == s.offset_after_max
                      ? " on every layer"
                      : fmt::format("..{} (MISMATCH)", s.offset_after_max)));
  line(fmt::format("long     decode  {}", Phase(r.long_decode)));
  line(fmt::format("         offset {} -> {}: the window of {} wrapped {} times",
                   r.long_offset_start, r.final_offset, r.config.window,
                   (r.final_offset - r.long_offset_start) / r.config.window));
  line(fmt::format("all decode {:.1f} tok/s, SDPA {:.1f} % of decode time", Rate(decode),
                   100 * SdpaShare(decode)));
  line("");
  line(
      fmt::format("cache    global  (KVCache) x {}: {} at offset {} ({} per token per layer, "
                  "grows with the context)",
                  global, Bytes(r.global_bytes), r.final_offset, Bytes(r.BytesPerToken())));
  line(
      fmt::format("         sliding (RotatingKVCache w={}) x {}: {}; during the long run "
                  "{}..{} (bound {}) {}",
                  r.config.window, sliding, Bytes(r.sliding_bytes), Bytes(r.sliding_bytes_min),
                  Bytes(r.sliding_bytes_max), Bytes(r.SlidingBound()),
                  r.sliding_bytes_max <= r.SlidingBound() ? "bounded" : "OVER THE BOUND"));
  if (r.check.ran) {
    line(
        fmt::format("check    {} logit rows vs a no-cache recompute of all {} tokens ({}): "
                    "max |diff| {:.2e} (tolerance {:.0e})  {}",
                    r.check.positions, r.check.sequence, Time(r.check.recompute_seconds),
                    r.check.max_abs_diff, kLogitTolerance, r.CheckPassed() ? "OK" : "FAILED"));
  } else {
    line("check    skipped (--no-check)");
  }
  return out;
}

std::string ToJson(const DemoReport& r) {
  const auto& c = r.config;
  const auto& s = r.speculation;
  ForwardStats decode = r.turn1_decode;
  decode += r.turn2_decode;
  decode += r.long_decode;
  std::string out = "{\n";
  out += fmt::format(
      R"(  "config": {{"layers": {}, "d_model": {}, "q_heads": {}, "kv_heads": {}, "head_dim": {}, )"
      R"("mlp_hidden": {}, "vocab": {}, "window": {}, "global_every": {}, "global_layers": {}, )"
      R"("kv_dtype": "{}", "params": {}}},)"
      "\n",
      c.layers, c.d_model, c.q_heads, c.kv_heads, c.head_dim, c.mlp_hidden, c.vocab, c.window,
      c.global_every, c.GlobalLayers(), c.kv_dtype, c.ParameterCount());
  out += fmt::format(R"(  "isa": "{}", "threads": {},)"
                     "\n",
                     r.isa, r.threads);
  out += fmt::format(R"(  "turn1": {{"prefill": {}, "decode": {}, "snapshot_tokens": {}, )"
                     R"("snapshot_bytes": {}, "snapshot_seconds": {:.9f}}},)"
                     "\n",
                     JsonPhase(r.turn1_prefill), JsonPhase(r.turn1_decode), r.snapshot_tokens,
                     r.snapshot_bytes, r.snapshot_seconds);
  out += fmt::format(
      R"(  "turn2": {{"restore_seconds": {:.9f}, "prefill": {}, "decode": {}, "cold_tokens": {}, )"
      R"("cold_prefill_seconds": {:.6f}, "saved_seconds": {:.6f}, "warm_vs_cold_max_abs_diff": {:.3e}}},)"
      "\n",
      r.restore_seconds, JsonPhase(r.turn2_prefill), JsonPhase(r.turn2_decode), r.cold_tokens,
      r.cold_prefill_seconds,
      r.cold_prefill_seconds - r.restore_seconds - r.turn2_prefill.total_seconds,
      r.warm_vs_cold_diff);
  out += fmt::format(
      R"(  "speculation": {{"drafted": {}, "wrong_index": {}, "accepted": {}, "offset_before": {}, )"
      R"("offset_during_global": {}, "offset_during_sliding": {}, "offset_after_min": {}, )"
      R"("offset_after_max": {}, "verify_seconds": {:.6f}}},)"
      "\n",
      s.drafted, s.wrong_index, s.accepted, s.offset_before, s.offset_during_global,
      s.offset_during_sliding, s.offset_after_min, s.offset_after_max, s.verify_seconds);
  out += fmt::format(
      R"(  "long": {{"decode": {}, "offset_start": {}, "offset_end": {}, "wraps": {}}},)"
      "\n",
      JsonPhase(r.long_decode), r.long_offset_start, r.final_offset,
      (r.final_offset - r.long_offset_start) / c.window);
  out += fmt::format(R"(  "decode": {},)"
                     "\n",
                     JsonPhase(decode));
  out += fmt::format(
      R"(  "cache_bytes": {{"bytes_per_token_per_layer": {}, "global_layers_total": {}, )"
      R"("sliding_layers_total": {}, "sliding_long_min": {}, "sliding_long_max": {}, )"
      R"("sliding_bound": {}}},)"
      "\n",
      r.BytesPerToken(), r.global_bytes, r.sliding_bytes, r.sliding_bytes_min, r.sliding_bytes_max,
      r.SlidingBound());
  out += fmt::format(
      R"(  "check": {{"ran": {}, "positions": {}, "sequence": {}, "max_abs_logit_diff": {:.3e}, )"
      R"("tolerance": {:.1e}, "recompute_seconds": {:.6f}, "passed": {}}})"
      "\n",
      r.check.ran, r.check.positions, r.check.sequence, r.check.max_abs_diff, kLogitTolerance,
      r.check.recompute_seconds, r.CheckPassed());
  out += "}\n";
  return out;
}

}  // namespace ringkv::model
