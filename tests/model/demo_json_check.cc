// Runs ringkv_demo with --json and the given flags, parses the report and checks
// it by structure and value: every field present with its type, positive rates,
// the speculative rollback visible in the offsets, bounded rotating memory, and
// logits equal to the no-cache recompute within tolerance, or, with --no-check,
// a check reported as skipped (never as failed) and a zero exit code; and the
// serving scene: every phase timed, the system prompt's blocks shared (fewer
// pool bytes than separate copies), every conversation checked; and the K/V
// dtype: its row bytes worked out here from the layout in dtype.h, its cost
// against an unrounded f32 recompute, and the serving pools' float dtype.
// Usage: ringkv_demo_check <path to ringkv_demo> [demo flags...]. Exit 0 = pass.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace {

using nlohmann::json;

int failures = 0;

void Fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  ++failures;
}

std::string Join(std::initializer_list<const char*> path) {
  std::string name;
  for (const char* key : path) name += std::string(name.empty() ? "" : ".") + key;
  return name;
}

// The value at `path`, or nullptr (after a failure) when an object on the way or
// the value itself is missing.
const json* At(const json& report, std::initializer_list<const char*> path) {
  const json* at = &report;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) {
      Fail(Join(path) + " is missing");
      return nullptr;
    }
    at = &(*at)[key];
  }
  return at;
}

double Number(const json& report, std::initializer_list<const char*> path) {
  const json* value = At(report, path);
  if (value == nullptr) return 0;
  if (!value->is_number()) {
    Fail(Join(path) + " is not a number: " + value->dump());
    return 0;
  }
  return value->get<double>();
}

// A count: a non-negative integer in the JSON, not a float that happens to be whole.
double Count(const json& report, std::initializer_list<const char*> path) {
  const json* value = At(report, path);
  if (value == nullptr) return 0;
  if (!value->is_number_unsigned() && !(value->is_number_integer() && value->get<long>() >= 0)) {
    Fail(Join(path) + " is not a count: " + value->dump());
    return 0;
  }
  return value->get<double>();
}

void Expect(bool ok, const char* what, double a, double b) {
  if (!ok) Fail(std::string(what) + " (" + std::to_string(a) + " vs " + std::to_string(b) + ")");
}

void CheckPhase(const json& report, std::initializer_list<const char*> path) {
  const json* phase = At(report, path);
  if (phase == nullptr) return;
  const double tokens = Count(*phase, {"tokens"});
  const double seconds = Number(*phase, {"seconds"});
  const double rate = Number(*phase, {"tokens_per_s"});
  const double sdpa = Number(*phase, {"sdpa_seconds"});
  const double cache = Number(*phase, {"cache_seconds"});
  const double other = Number(*phase, {"other_seconds"});
  const std::string name = Join(path);
  Expect(tokens > 0 && rate > 0, (name + ": tokens and tokens/s must be positive").c_str(), tokens,
         rate);
  Expect(sdpa > 0 && sdpa < seconds, (name + ": SDPA time is part of the forward time").c_str(),
         sdpa, seconds);
  Expect(cache >= 0 && other >= 0, (name + ": cache and other times are >= 0").c_str(), cache,
         other);
}

void CheckCheck(const json& report, bool skipped, int exit_code) {
  const json* check = At(report, {"check"});
  if (check == nullptr) return;
  const json* status = At(*check, {"status"});
  const json* passed = At(*check, {"passed"});
  if (status == nullptr || passed == nullptr) return;
  if (skipped) {
    if (*status != "skipped") Fail("check.status with --no-check: " + status->dump());
    if (!passed->is_null()) Fail("check.passed with --no-check must be null: " + passed->dump());
    if (check->contains("max_abs_logit_diff")) Fail("a skipped check reports no difference");
    Expect(exit_code == 0, "a run that skips the check exits 0", exit_code, 0);
    return;
  }
  if (*status != "passed") Fail("check.status: " + status->dump());
  if (*passed != true) Fail("check.passed: " + passed->dump());
  Expect(exit_code == 0, "a run whose check passed exits 0", exit_code, 0);
  const double tolerance = Number(*check, {"tolerance"});
  const double diff = Number(*check, {"max_abs_logit_diff"});
  const double positions = Count(*check, {"positions"});
  const double sequence = Count(*check, {"sequence"});
  const double drafted = Count(report, {"speculation", "drafted"});
  // Quantized K/V on a tier other than scalar: the kernels round queries and
  // softmax weights to int16 (kernels::RoundsQuantizedToInt16), allowed 5e-3 for
  // int8 and 0.15 for int4 (model::LogitTolerance says why); bf16 K/V on the
  // AVX-512 tier, which rounds the softmax weights to bf16 where the CPU has
  // AVX512-BF16 (kernels::RoundsBf16Weights), 5e-3.
  const json* kv_dtype = At(report, {"config", "kv_dtype"});
  const json* isa = At(report, {"isa"});
  const bool int16 = kv_dtype != nullptr && isa != nullptr && *isa != "scalar";
  const bool int8 = int16 && *kv_dtype == "int8";
  const bool int4 = int16 && (*kv_dtype == "int4" || *kv_dtype == "int4h");
  const bool bf16_weights =
      kv_dtype != nullptr && isa != nullptr && *isa == "avx512" && *kv_dtype == "bf16";
  const double allowed = int8 || bf16_weights ? 5e-3 : int4 ? 0.15 : 1e-3;
  Expect(tolerance > 0 && tolerance <= allowed, "tolerance", tolerance, allowed);
  Expect(positions > drafted, "many logit rows are compared", positions, drafted);
  Expect(sequence == Count(report, {"long", "offset_end"}), "the whole sequence is recomputed",
         sequence, Count(report, {"long", "offset_end"}));
  Expect(diff >= 0 && diff <= tolerance, "cached logits equal the no-cache recompute", diff,
         tolerance);
  const double warm_cold = Number(report, {"turn2", "warm_vs_cold_max_abs_diff"});
  Expect(warm_cold <= tolerance, "the restored snapshot gives the cold prefill's logits", warm_cold,
         tolerance);
}

// Bytes of one stored row of n values (kernels/ringkv/kernels/dtype.h), from the
// dtype's name: the data, then one f32 scale per row (int8) or per 32 (int4,
// int4h: the rotation does not change the layout).
double RowBytes(const std::string& dtype, double n) {
  if (dtype == "f32") return 4 * n;
  if (dtype == "f16" || dtype == "bf16") return 2 * n;
  if (dtype == "int8") return n + 4;
  if (dtype == "int4" || dtype == "int4h") return n / 2 + n / 32 * 4;
  Fail("config.kv_dtype is not a storage dtype: " + dtype);
  return 0;
}

std::string KvDtype(const json& report) {
  const json* dtype = At(report, {"config", "kv_dtype"});
  return dtype != nullptr && dtype->is_string() ? dtype->get<std::string>() : std::string();
}

void CheckKvBytes(const json& report) {
  const std::string dtype = KvDtype(report);
  const double head_dim = Count(report, {"config", "head_dim"});
  const double heads = Count(report, {"config", "kv_heads"});
  const json* stated = At(report, {"cache_bytes", "kv_dtype"});
  if (stated != nullptr && *stated != dtype) Fail("cache_bytes.kv_dtype: " + stated->dump());
  const double key = Count(report, {"cache_bytes", "key_row_bytes"});
  const double value = Count(report, {"cache_bytes", "value_row_bytes"});
  Expect(key == RowBytes(dtype, head_dim) && value == key, "K and V row bytes of the dtype", key,
         RowBytes(dtype, head_dim));
  Expect(Count(report, {"cache_bytes", "bytes_per_token_per_layer"}) == heads * (key + value),
         "bytes per token per layer = kv_heads x (K row + V row)",
         Count(report, {"cache_bytes", "bytes_per_token_per_layer"}), heads * (key + value));
}

void CheckKvCost(const json& report, bool skipped) {
  const json* cost = At(report, {"kv_cost"});
  if (cost == nullptr) return;
  if (skipped) {
    if (!cost->is_null()) Fail("kv_cost with --no-check must be null: " + cost->dump());
    return;
  }
  if (!cost->is_object()) {
    Fail("kv_cost is not an object: " + cost->dump());
    return;
  }
  const std::string dtype = KvDtype(report);
  const json* stated = At(*cost, {"kv_dtype"});
  if (stated != nullptr && *stated != dtype) Fail("kv_cost.kv_dtype: " + stated->dump());
  const double positions = Count(*cost, {"positions"});
  const double max = Number(*cost, {"max_abs_logit_diff"});
  const double mean = Number(*cost, {"mean_abs_logit_diff"});
  const double differs = Count(*cost, {"greedy_token_differs"});
  const double fraction = Number(*cost, {"greedy_token_differs_fraction"});
  Expect(positions == Count(report, {"check", "positions"}),
         "kv_cost compares the rows the check compares", positions,
         Count(report, {"check", "positions"}));
  Expect(mean >= 0 && mean <= max, "kv_cost: 0 <= mean <= max", mean, max);
  Expect(differs <= positions && fraction == differs / positions,
         "kv_cost: greedy fraction = differs / positions", fraction, differs / positions);
  Expect(Number(*cost, {"recompute_seconds"}) > 0, "kv_cost: the recompute is timed",
         Number(*cost, {"recompute_seconds"}), 0);
  if (dtype == "f32") {
    // No rounding to pay for: the check's recompute is the reference.
    Expect(max == Number(report, {"check", "max_abs_logit_diff"}),
           "f32 K/V: the cost is the check's own difference", max,
           Number(report, {"check", "max_abs_logit_diff"}));
  } else {
    Expect(max > 0 && mean > 0, "a rounded K/V dtype moves the logits", max, mean);
  }
}

void CheckServing(const json& report, bool skipped) {
  const json* serving = At(report, {"serving"});
  if (serving == nullptr) return;
  if (!serving->is_object()) {
    Fail("serving is not an object (the scene runs by default): " + serving->dump());
    return;
  }
  const double conversations = Count(*serving, {"conversations"});
  const double system = Count(*serving, {"system_prompt_tokens"});
  const double user = Count(*serving, {"user_turn_tokens"});
  const double steps = Count(*serving, {"steps"});
  Expect(conversations >= 2, "serving: several conversations", conversations, 2);
  for (const char* phase : {"system_prefill", "user_prefill", "decode"}) {
    CheckPhase(*serving, {phase});
  }
  Expect(Count(*serving, {"system_prefill", "tokens"}) == system,
         "serving: the system prompt is prefilled once",
         Count(*serving, {"system_prefill", "tokens"}), system);
  Expect(Count(*serving, {"user_prefill", "tokens"}) == conversations * user,
         "serving: every user turn is prefilled", Count(*serving, {"user_prefill", "tokens"}),
         conversations * user);
  Expect(Count(*serving, {"decode", "tokens"}) == conversations * steps,
         "serving: one token per conversation per step", Count(*serving, {"decode", "tokens"}),
         conversations * steps);
  // The pools store the --kv-dtype itself, quantized ones included.
  const std::string dtype = KvDtype(report);
  const json* pool = At(*serving, {"pool_dtype"});
  if (pool != nullptr && *pool != dtype) {
    Fail("serving.pool_dtype for --kv-dtype " + dtype + ": " + pool->dump());
  }
  const json* reason = At(*serving, {"pool_dtype_reason"});
  if (reason != nullptr && !reason->is_null()) {
    Fail("serving.pool_dtype_reason is set though the pools store --kv-dtype: " + reason->dump());
  }
  const double used = Count(*serving, {"pool_bytes", "used"});
  const double separate = Count(*serving, {"pool_bytes", "separate"});
  const double saved = Count(*serving, {"pool_bytes", "saved"});
  Expect(used > 0 && used < separate, "serving: sharing the system prompt takes fewer bytes", used,
         separate);
  Expect(saved == separate - used, "serving: saved = separate - used", saved, separate - used);
  const json* check = At(*serving, {"check"});
  if (check == nullptr) return;
  if (skipped) {
    if (!check->is_null()) Fail("serving.check with --no-check must be null: " + check->dump());
    return;
  }
  const double diff = Number(*check, {"max_abs_logit_diff"});
  const double tolerance = Number(*check, {"tolerance"});
  const json* passed = At(*check, {"passed"});
  if (passed != nullptr && *passed != true) Fail("serving.check.passed: " + passed->dump());
  Expect(diff >= 0 && diff <= tolerance, "serving: every conversation equals its recompute", diff,
         tolerance);
  Expect(Count(*check, {"positions"}) == conversations * (steps + 1),
         "serving: every decoded row and each user turn's last row are compared",
         Count(*check, {"positions"}), conversations * (steps + 1));
  const json* per = At(*check, {"per_conversation"});
  if (per != nullptr && (!per->is_array() || static_cast<double>(per->size()) != conversations)) {
    Fail("serving.check.per_conversation must hold one value per conversation: " + per->dump());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ringkv_demo_check <ringkv_demo> [flags...]\n");
    return 2;
  }
  std::string command = std::string("'") + argv[1] + "' --json --no-progress";
  bool skipped = false;
  for (int i = 2; i < argc; ++i) {
    command += std::string(" '") + argv[i] + "'";
    skipped = skipped || std::string_view(argv[i]) == "--no-check";
  }
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 2;
  std::string text;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  const int status = pclose(pipe);
  std::fputs(text.c_str(), stdout);
  if (status == -1 || !WIFEXITED(status)) {
    std::fprintf(stderr, "FAIL: the demo did not exit normally (status %d)\n", status);
    return 1;
  }
  const int exit_code = WEXITSTATUS(status);

  const json report = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.is_object()) {
    std::fprintf(stderr, "FAIL: the report is not a JSON object\n");
    return 1;
  }

  const double layers = Count(report, {"config", "layers"});
  const double global_layers = Count(report, {"config", "global_layers"});
  const double window = Count(report, {"config", "window"});
  Expect(global_layers <= layers, "config.global_layers <= config.layers", global_layers, layers);
  Expect(window > 0, "config.window", window, 0);
  const json* dtype = At(report, {"config", "kv_dtype"});
  if (dtype != nullptr && !dtype->is_string()) Fail("config.kv_dtype is not a string");
  const json* isa = At(report, {"isa"});
  if (isa != nullptr && (!isa->is_string() || isa->get<std::string>().empty())) {
    Fail("isa is not a tier name: " + isa->dump());
  }
  Expect(Count(report, {"threads"}) >= 1, "threads", Count(report, {"threads"}), 1);

  for (const char* turn : {"turn1", "turn2"}) {
    CheckPhase(report, {turn, "prefill"});
    CheckPhase(report, {turn, "decode"});
  }
  CheckPhase(report, {"long", "decode"});
  CheckPhase(report, {"decode"});
  const double decoded = Count(report, {"turn1", "decode", "tokens"}) +
                         Count(report, {"turn2", "decode", "tokens"}) +
                         Count(report, {"long", "decode", "tokens"});
  Expect(Count(report, {"decode", "tokens"}) == decoded, "decode sums the decode phases",
         Count(report, {"decode", "tokens"}), decoded);

  const double wraps = Count(report, {"long", "wraps"});
  Expect(wraps >= 2, "the long generation must wrap the window at least twice", wraps, 2);
  const double snapshot_tokens = Count(report, {"turn1", "snapshot_tokens"});
  const double snapshot = Count(report, {"turn1", "snapshot_bytes"});
  Expect(snapshot > 0, "the snapshot must cover K/V bytes", snapshot, 0);
  Expect(snapshot_tokens == Count(report, {"turn1", "prefill", "tokens"}) +
                                Count(report, {"turn1", "decode", "tokens"}),
         "the snapshot covers turn 1", snapshot_tokens, 0);
  Expect(Count(report, {"turn2", "cold_tokens"}) ==
             snapshot_tokens + Count(report, {"turn2", "prefill", "tokens"}),
         "the cold prefill covers turn 1 and turn 2's prompt",
         Count(report, {"turn2", "cold_tokens"}), snapshot_tokens);

  const double drafted = Count(report, {"speculation", "drafted"});
  const double accepted = Count(report, {"speculation", "accepted"});
  const double before = Count(report, {"speculation", "offset_before"});
  Expect(accepted < drafted, "the imperfect draft must lose tokens", accepted, drafted);
  Expect(Count(report, {"speculation", "offset_during_sliding"}) == before,
         "rotating caches are untouched until Commit", before, before);
  Expect(Count(report, {"speculation", "offset_during_global"}) == before + drafted,
         "KVCache layers are written through during verification", before, drafted);
  const double after_min = Count(report, {"speculation", "offset_after_min"});
  const double after_max = Count(report, {"speculation", "offset_after_max"});
  Expect(after_min == before + accepted && after_max == after_min,
         "after Commit every layer is at offset_before + accepted", after_min, before + accepted);

  const double per_token = Count(report, {"cache_bytes", "bytes_per_token_per_layer"});
  const double end = Count(report, {"long", "offset_end"});
  const double global_bytes = Count(report, {"cache_bytes", "global_layers_total"});
  Expect(global_bytes >= global_layers * end * per_token, "global layers hold the whole context",
         global_bytes, global_layers * end * per_token);
  const double sliding_max = Count(report, {"cache_bytes", "sliding_long_max"});
  const double sliding_min = Count(report, {"cache_bytes", "sliding_long_min"});
  const double bound = Count(report, {"cache_bytes", "sliding_bound"});
  Expect(sliding_max > 0 && sliding_max <= bound, "rotating memory stays within its bound",
         sliding_max, bound);
  Expect(sliding_max == sliding_min, "rotating memory stays flat while the window wraps",
         sliding_max, sliding_min);

  CheckCheck(report, skipped, exit_code);
  CheckKvBytes(report);
  CheckKvCost(report, skipped);
  CheckServing(report, skipped);

  if (failures == 0) std::fprintf(stderr, "demo report OK\n");
  return failures == 0 ? 0 : 1;
}
