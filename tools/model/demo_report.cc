#include "demo_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ringkv/format.h"
#include "ringkv/kernels/sdpa.h"
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
nlohmann::ordered_json JsonPhase(const ForwardStats& s) {
  return {{"tokens", s.tokens},
          {"seconds", s.total_seconds},
          {"tokens_per_s", Rate(s)},
          {"sdpa_seconds", s.sdpa_seconds},
          {"cache_seconds", s.cache_seconds},
          {"other_seconds", s.OtherSeconds()}};
}

}  // namespace

double ServingReport::MaxDiff() const {
  double worst = 0;
  for (const double d : max_abs_diff) {
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

double LogitTolerance(DType kv_dtype, kernels::Isa tier) {
  if (kv_dtype == DType::kBF16 && kernels::RoundsBf16Weights(tier)) {
    return kLogitToleranceBf16Weights;
  }
  if (!IsQuantized(kv_dtype) || !kernels::RoundsQuantizedToInt16(tier)) return kLogitTolerance;
  return IsInt4(kv_dtype) ? kLogitToleranceInt4Int16 : kLogitToleranceInt16;
}

CheckVerdict DemoReport::Verdict() const {
  if (!check.ran) return CheckVerdict::kSkipped;
  // NaN fails: a comparison that is not true is not a pass.
  const bool main = check.max_abs_diff <= logit_tolerance;
  const bool served = !serving.Checked() || serving.MaxDiff() <= logit_tolerance;
  return main && served ? CheckVerdict::kPassed : CheckVerdict::kFailed;
}

std::size_t DemoReport::BytesPerToken() const {
  return static_cast<std::size_t>(config.KvBytesPerToken());
}

std::size_t DemoReport::SlidingBound() const {
  const int sliding = config.layers - config.GlobalLayers();
  const std::int64_t block = RotatingKVCache::kDefaultBlockTokens;
  const std::int64_t longest =
      std::max({turn1_prefill.tokens, turn2_prefill.tokens, std::int64_t{speculation.drafted}});
  const std::int64_t slots = (config.window + longest + block - 1) / block * block;
  // A block keeps each quantized row on a 4-byte boundary (docs/caches.md,
  // "Quantized storage"), so a row may take up to 3 bytes more than RowBytes.
  const std::size_t row = RowBytes(config.kv_dtype, config.head_dim);
  const std::size_t stored = IsQuantized(config.kv_dtype) ? (row + 3) / 4 * 4 : row;
  return static_cast<std::size_t>(sliding) * static_cast<std::size_t>(slots) *
         static_cast<std::size_t>(config.kv_heads) * 2 * stored;
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
  const std::size_t row = RowBytes(r.config.kv_dtype, r.config.head_dim);
  line(fmt::format(
      "         K/V {}: a row of {} values takes {} B (scales included), {} per token per layer "
      "({:.2f}x f16)",
      r.config.kv_dtype, r.config.head_dim, row, Bytes(r.BytesPerToken()),
      static_cast<double>(row) / static_cast<double>(RowBytes(DType::kF16, r.config.head_dim))));
  if (r.check.ran) {
    line(fmt::format(
        "check    {} logit rows vs a no-cache recompute of all {} tokens ({}): "
        "max |diff| {:.2e} (tolerance {:.0e})  {}",
        r.check.positions, r.check.sequence, Time(r.check.recompute_seconds), r.check.max_abs_diff,
        r.logit_tolerance, r.Verdict() == CheckVerdict::kPassed ? "OK" : "FAILED"));
  } else {
    line("check    skipped (--no-check)");
  }
  const KvCostReport& cost = r.kv_cost;
  if (cost.ran) {
    line(fmt::format(
        "cost     {} K/V vs a no-cache recompute with f32 K/V, not rounded ({} rows, {}): "
        "max |diff| {:.2e}, mean |diff| {:.2e}; greedy token differs in {} rows ({:.2f} %)",
        r.config.kv_dtype, cost.positions, Time(cost.recompute_seconds), cost.max_abs_diff,
        cost.mean_abs_diff, cost.greedy_differs, 100 * cost.GreedyDiffersFraction()));
  } else {
    line("cost     of the K/V dtype not measured (--no-check)");
  }
  line("");
  const ServingReport& sv = r.serving;
  if (sv.conversations > 0) {
    line(fmt::format(
        "serving  {} conversations sharing a {}-token system prompt: prefilled once in {}, "
        "CopyPrefix'ed to the others (no K/V copied)",
        sv.conversations, sv.system_tokens, Time(sv.system_prefill.total_seconds)));
    if (sv.pool_dtype != r.config.kv_dtype) {
      line(
          fmt::format("         pools store K/V as {}: --kv-dtype {} applies to the "
                      "single-sequence caches above",
                      sv.pool_dtype, r.config.kv_dtype));
    }
    line(fmt::format("         user turns {} x {} tokens in one batch: {}", sv.conversations,
                     sv.user_tokens, Time(sv.user_prefill.total_seconds)));
    line(fmt::format("         decode  {}  ({} steps of {} tokens, one batch each)",
                     Phase(sv.decode), sv.steps, sv.conversations));
    line(fmt::format(
        "         pools   {} used vs {} as separate copies: sharing saves {} ({:.1f}x less)",
        Bytes(sv.used_bytes), Bytes(sv.separate_bytes),
        Bytes(sv.separate_bytes > sv.used_bytes ? sv.separate_bytes - sv.used_bytes : 0),
        sv.used_bytes > 0
            ? static_cast<double>(sv.separate_bytes) / static_cast<double>(sv.used_bytes)
            : 0));
    if (sv.Checked()) {
      std::string diffs;
      for (const double d : sv.max_abs_diff)
        diffs += fmt::format("{}{:.2e}", diffs.empty() ? "" : ", ", d);
      line(fmt::format(
          "         check   {} logit rows vs a no-cache recompute of each conversation ({}): "
          "max |diff| per conversation {} (tolerance {:.0e})  {}",
          sv.positions, Time(sv.recompute_seconds), diffs, r.logit_tolerance,
          sv.MaxDiff() <= r.logit_tolerance ? "OK" : "FAILED"));
    }
  } else {
    line("serving  skipped (--conversations 0)");
  }
  return out;
}

std::string ToJson(const DemoReport& r) {
  using Json = nlohmann::ordered_json;  // fields in the order docs/decode_demo.md lists them
  const auto& c = r.config;
  const auto& s = r.speculation;
  ForwardStats decode = r.turn1_decode;
  decode += r.turn2_decode;
  decode += r.long_decode;
  Json out;
  out["config"] = {{"layers", c.layers},
                   {"d_model", c.d_model},
                   {"q_heads", c.q_heads},
                   {"kv_heads", c.kv_heads},
                   {"head_dim", c.head_dim},
                   {"mlp_hidden", c.mlp_hidden},
                   {"vocab", c.vocab},
                   {"window", c.window},
                   {"global_every", c.global_every},
                   {"global_layers", c.GlobalLayers()},
                   {"kv_dtype", fmt::format("{}", c.kv_dtype)},
                   {"params", c.ParameterCount()}};
  out["isa"] = r.isa;
  out["threads"] = r.threads;
  out["turn1"] = {{"prefill", JsonPhase(r.turn1_prefill)},
                  {"decode", JsonPhase(r.turn1_decode)},
                  {"snapshot_tokens", r.snapshot_tokens},
                  {"snapshot_bytes", r.snapshot_bytes},
                  {"snapshot_seconds", r.snapshot_seconds}};
  out["turn2"] = {
      {"restore_seconds", r.restore_seconds},
      {"prefill", JsonPhase(r.turn2_prefill)},
      {"decode", JsonPhase(r.turn2_decode)},
      {"cold_tokens", r.cold_tokens},
      {"cold_prefill_seconds", r.cold_prefill_seconds},
      {"saved_seconds", r.cold_prefill_seconds - r.restore_seconds - r.turn2_prefill.total_seconds},
      {"warm_vs_cold_max_abs_diff", r.warm_vs_cold_diff}};
  out["speculation"] = {{"drafted", s.drafted},
                        {"wrong_index", s.wrong_index},
                        {"accepted", s.accepted},
                        {"offset_before", s.offset_before},
                        {"offset_during_global", s.offset_during_global},
                        {"offset_during_sliding", s.offset_during_sliding},
                        {"offset_after_min", s.offset_after_min},
                        {"offset_after_max", s.offset_after_max},
                        {"verify_seconds", s.verify_seconds}};
  out["long"] = {{"decode", JsonPhase(r.long_decode)},
                 {"offset_start", r.long_offset_start},
                 {"offset_end", r.final_offset},
                 {"wraps", (r.final_offset - r.long_offset_start) / c.window}};
  out["decode"] = JsonPhase(decode);
  const ServingReport& sv = r.serving;
  if (sv.conversations == 0) {
    out["serving"] = nullptr;
  } else {
    Json serving = {
        {"conversations", sv.conversations},
        {"system_prompt_tokens", sv.system_tokens},
        {"user_turn_tokens", sv.user_tokens},
        {"steps", sv.steps},
        {"pool_dtype", fmt::format("{}", sv.pool_dtype)},
        {"pool_dtype_reason",
         sv.pool_dtype == c.kv_dtype
             ? Json(nullptr)
             : Json(fmt::format("the pools store {}; --kv-dtype {} applies to the "
                                "single-sequence caches",
                                sv.pool_dtype, c.kv_dtype))},
        {"system_prefill", JsonPhase(sv.system_prefill)},
        {"user_prefill", JsonPhase(sv.user_prefill)},
        {"decode", JsonPhase(sv.decode)},
        {"pool_bytes",
         {{"used", sv.used_bytes},
          {"separate", sv.separate_bytes},
          {"saved", sv.separate_bytes > sv.used_bytes ? sv.separate_bytes - sv.used_bytes : 0}}}};
    if (sv.Checked()) {
      serving["check"] = {{"passed", sv.MaxDiff() <= r.logit_tolerance},
                          {"positions", sv.positions},
                          {"max_abs_logit_diff", sv.MaxDiff()},
                          {"per_conversation", sv.max_abs_diff},
                          {"tolerance", r.logit_tolerance},
                          {"recompute_seconds", sv.recompute_seconds}};
    } else {
      serving["check"] = nullptr;
    }
    out["serving"] = std::move(serving);
  }
  out["cache_bytes"] = {{"kv_dtype", fmt::format("{}", c.kv_dtype)},
                        {"key_row_bytes", RowBytes(c.kv_dtype, c.head_dim)},
                        {"value_row_bytes", RowBytes(c.kv_dtype, c.head_dim)},
                        {"bytes_per_token_per_layer", r.BytesPerToken()},
                        {"global_layers_total", r.global_bytes},
                        {"sliding_layers_total", r.sliding_bytes},
                        {"sliding_long_min", r.sliding_bytes_min},
                        {"sliding_long_max", r.sliding_bytes_max},
                        {"sliding_bound", r.SlidingBound()}};
  Json& check = out["check"];
  switch (r.Verdict()) {
    case CheckVerdict::kSkipped:
      check = {{"status", "skipped"}, {"passed", nullptr}, {"tolerance", r.logit_tolerance}};
      break;
    case CheckVerdict::kPassed:
    case CheckVerdict::kFailed: {
      const bool passed = r.Verdict() == CheckVerdict::kPassed;
      check = {{"status", passed ? "passed" : "failed"},
               {"passed", passed},
               {"positions", r.check.positions},
               {"sequence", r.check.sequence},
               {"max_abs_logit_diff", r.check.max_abs_diff},
               {"tolerance", r.logit_tolerance},
               {"recompute_seconds", r.check.recompute_seconds}};
      break;
    }
  }
  const KvCostReport& cost = r.kv_cost;
  if (cost.ran) {
    out["kv_cost"] = {{"kv_dtype", fmt::format("{}", c.kv_dtype)},
                      {"reference", "no-cache recompute with f32 K/V, not rounded"},
                      {"positions", cost.positions},
                      {"max_abs_logit_diff", cost.max_abs_diff},
                      {"mean_abs_logit_diff", cost.mean_abs_diff},
                      {"greedy_token_differs", cost.greedy_differs},
                      {"greedy_token_differs_fraction", cost.GreedyDiffersFraction()},
                      {"recompute_seconds", cost.recompute_seconds}};
  } else {
    out["kv_cost"] = nullptr;
  }
  return out.dump(2) + "\n";
}

int ExitCode(const DemoReport& r) {
  return r.Verdict() == CheckVerdict::kFailed ? kExitCheckFailed : 0;
}

}  // namespace ringkv::model
