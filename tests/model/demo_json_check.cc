// Runs ringkv_demo with --json and the given flags, and checks the report for
// sanity: positive rates, the speculative rollback visible in the offsets, bounded
// rotating memory, and logits equal to the no-cache recompute within tolerance.
// Usage: ringkv_demo_check <path to ringkv_demo> [demo flags...]. Exit 0 = pass.
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace {

// The value after the keys `path`, each searched after the previous one (the
// demo's JSON has a fixed order, so the first match is the field meant).
std::optional<std::string> Field(const std::string& json, std::initializer_list<const char*> path) {
  std::size_t at = 0;
  for (const char* key : path) {
    at = json.find("\"" + std::string(key) + "\":", at);
    if (at == std::string::npos) return std::nullopt;
    at += std::string_view(key).size() + 3;
  }
  while (at < json.size() && json[at] == ' ') ++at;
  const std::size_t end = json.find_first_of(",}\n", at);
  return json.substr(at, end - at);
}

int failures = 0;

double Number(const std::string& json, std::initializer_list<const char*> path) {
  const auto text = Field(json, path);
  std::string name;
  for (const char* key : path) name += std::string(name.empty() ? "" : ".") + key;
  if (!text) {
    std::fprintf(stderr, "FAIL: field %s is missing\n", name.c_str());
    ++failures;
    return 0;
  }
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  if (end == text->c_str()) {
    std::fprintf(stderr, "FAIL: field %s is not a number: %s\n", name.c_str(), text->c_str());
    ++failures;
  }
  return value;
}

void Expect(bool ok, const char* what, double a, double b) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s (%g vs %g)\n", what, a, b);
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ringkv_demo_check <ringkv_demo> [flags...]\n");
    return 2;
  }
  std::string command = std::string("'") + argv[1] + "' --json --no-progress";
  for (int i = 2; i < argc; ++i) command += std::string(" '") + argv[i] + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 2;
  std::string json;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) json.append(buffer, n);
  const int status = pclose(pipe);
  std::fputs(json.c_str(), stdout);
  if (status != 0) {
    std::fprintf(stderr, "FAIL: the demo exited with status %d\n", status);
    return 1;
  }

  for (const char* turn : {"turn1", "turn2"}) {
    for (const char* phase : {"prefill", "decode"}) {
      const double rate = Number(json, {turn, phase, "tokens_per_s"});
      Expect(rate > 0, "tokens/s must be positive", rate, 0);
      const double sdpa = Number(json, {turn, phase, "sdpa_seconds"});
      const double total = Number(json, {turn, phase, "seconds"});
      Expect(sdpa > 0 && sdpa < total, "SDPA time must be part of the forward time", sdpa, total);
    }
  }
  const double long_rate = Number(json, {"long", "decode", "tokens_per_s"});
  Expect(long_rate > 0, "long generation tokens/s must be positive", long_rate, 0);
  const double window = Number(json, {"config", "window"});
  const double wraps = Number(json, {"long", "wraps"});
  Expect(wraps >= 2, "the long generation must wrap the window at least twice", wraps, 2);
  Expect(window > 0, "window", window, 0);

  const double snapshot = Number(json, {"turn1", "snapshot_bytes"});
  Expect(snapshot > 0, "the snapshot must cover K/V bytes", snapshot, 0);

  const double drafted = Number(json, {"speculation", "drafted"});
  const double accepted = Number(json, {"speculation", "accepted"});
  const double before = Number(json, {"speculation", "offset_before"});
  Expect(accepted < drafted, "the imperfect draft must lose tokens", accepted, drafted);
  Expect(Number(json, {"speculation", "offset_during_sliding"}) == before,
         "rotating caches are untouched until Commit", before, before);
  Expect(Number(json, {"speculation", "offset_during_global"}) == before + drafted,
         "KVCache layers are written through during verification", before, drafted);
  const double after_min = Number(json, {"speculation", "offset_after_min"});
  const double after_max = Number(json, {"speculation", "offset_after_max"});
  Expect(after_min == before + accepted && after_max == after_min,
         "after Commit every layer is at offset_before + accepted", after_min, before + accepted);

  const double per_token = Number(json, {"cache_bytes", "bytes_per_token_per_layer"});
  const double global_layers = Number(json, {"config", "global_layers"});
  const double end = Number(json, {"long", "offset_end"});
  const double global_bytes = Number(json, {"cache_bytes", "global_layers_total"});
  Expect(global_bytes >= global_layers * end * per_token, "global layers hold the whole context",
         global_bytes, global_layers * end * per_token);
  const double sliding_max = Number(json, {"cache_bytes", "sliding_long_max"});
  const double sliding_min = Number(json, {"cache_bytes", "sliding_long_min"});
  const double bound = Number(json, {"cache_bytes", "sliding_bound"});
  Expect(sliding_max > 0 && sliding_max <= bound, "rotating memory stays within its bound",
         sliding_max, bound);
  Expect(sliding_max == sliding_min, "rotating memory stays flat while the window wraps",
         sliding_max, sliding_min);

  const double tolerance = Number(json, {"check", "tolerance"});
  const double diff = Number(json, {"check", "max_abs_logit_diff"});
  const double positions = Number(json, {"check", "positions"});
  Expect(tolerance > 0 && tolerance <= 1e-3, "tolerance", tolerance, 1e-3);
  Expect(positions > drafted, "many logit rows are compared", positions, drafted);
  Expect(diff <= tolerance, "cached logits equal the no-cache recompute", diff, tolerance);
  const double warm_cold = Number(json, {"turn2", "warm_vs_cold_max_abs_diff"});
  Expect(warm_cold <= tolerance, "the restored snapshot gives the cold prefill's logits", warm_cold,
         tolerance);
  Expect(Field(json, {"check", "passed"}) == std::optional<std::string>("true"), "check.passed", 0,
         0);

  if (failures == 0) std::fprintf(stderr, "demo report OK\n");
  return failures == 0 ? 0 : 1;
}
