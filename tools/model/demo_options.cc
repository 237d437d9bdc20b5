#include "demo_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ringkv/dtype.h"
#include "ringkv/error.h"
#include "ringkv/format.h"
#include "serving_caches.h"

namespace ringkv::model {
namespace {

constexpr const char* kDescription =
    "A decode loop of a tiny transformer with random weights on ringkv's caches:\n"
    "turn 1 (prefill, decode, snapshot), turn 2 (restore the snapshot instead of\n"
    "re-prefilling the shared prefix), one speculative step, a long generation\n"
    "that wraps the sliding window, a serving scene (conversations sharing a\n"
    "system prompt, decoded together in one batch from multi-sequence caches),\n"
    "and a check of every logit row against a no-cache recompute.";

// CLI11 2.1 reads an unsigned value with strtoull, which wraps "-1" and
// saturates on overflow: take decimal digits that fit 64 bits, nothing else.
CLI::Validator Uint64() {
  return {[](std::string& text) -> std::string {
            std::uint64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, ec] = std::from_chars(text.data(), end, value);
            if (text.empty() || ec != std::errc() || ptr != end) {
              return fmt::format("{} is not an integer in 0..{}", text,
                                 std::numeric_limits<std::uint64_t>::max());
            }
            return {};
          },
          "UINT64"};
}

// Flags whose parsed form is not yet the option's.
struct Spelled {
  bool no_check = false;
  std::string kv_dtype = "f16";
};

DType KvDtype(const std::string& name) {
  return StorageDTypeNamed(name).value_or(DType::kF16);  // the flag's check lets names only
}

// Declares every flag on `app`, writing into `o` (and `spelled`) when parsed.
void AddFlags(CLI::App& app, DemoOptions& o, Spelled& spelled) {
  // A flag given twice takes its last value, as the demo always did.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "print this help and exit");
  app.footer(
      "Each flag's value may follow an '=' or come as the next argument.\n"
      "See docs/decode_demo.md.\n");
  auto opt = [&app](const char* name, auto& value, const char* help, const char* group) {
    return app.add_option(name, value, help)->capture_default_str()->group(group);
  };
  ModelConfig& m = o.model;
  const char* model = "model size";
  opt("--layers", m.layers, "transformer layers", model);
  opt("--d-model", m.d_model, "residual width", model);
  opt("--q-heads", m.q_heads, "query heads", model);
  opt("--kv-heads", m.kv_heads, "K/V heads (divides --q-heads)", model);
  opt("--head-dim", m.head_dim, "head dimension (even: rotary pairs)", model);
  opt("--mlp", m.mlp_hidden, "SwiGLU inner width", model);
  opt("--vocab", m.vocab, "vocabulary size", model);
  opt("--window", m.window, "sliding-window layers see this many tokens", model);
  opt("--global-every", m.global_every, "every N-th layer is global (1: all, 0: none)", model);
  opt("--kv-dtype", spelled.kv_dtype,
      "what the caches store: f32, f16, bf16, int8, int4 or int4h (int4 with a Hadamard "
      "rotation) (int4, int4h: --head-dim a multiple of 32; the serving scene's pools store f16 "
      "for the quantized dtypes)",
      model)
      ->check(CLI::IsMember({"f32", "f16", "bf16", "int8", "int4", "int4h"}));
  opt("--seed", m.seed, "weights", model)->check(Uint64());
  const char* context = "context";
  opt("--prompt", o.prompt, "turn 1 prompt tokens", context);
  opt("--decode", o.decode, "turn 1 generated tokens", context);
  opt("--turn2-prompt", o.turn2_prompt, "turn 2 new prompt tokens", context);
  opt("--turn2-decode", o.turn2_decode, "turn 2 generated tokens", context);
  opt("--draft", o.draft, "speculative tokens (one is deliberately wrong)", context);
  opt("--long", o.long_tokens, "tokens of the long generation", context);
  opt("--temperature", o.temperature, "0 is greedy; > 0 samples with --prompt-seed", context);
  opt("--prompt-seed", o.prompt_seed, "prompt token ids and sampling", context);
  const char* serving = "serving scene";
  opt("--conversations", o.conversations, "conversations sharing the system prompt (0: no scene)",
      serving);
  opt("--system-prompt", o.system_prompt, "system prompt tokens, prefilled once", serving);
  opt("--user-turn", o.user_turn, "each conversation's own prompt tokens", serving);
  opt("--serve-decode", o.serve_decode, "batched decode steps (one token per conversation)",
      serving);
  const char* run = "run";
  opt("--threads", o.threads, "pool size (0: one per hardware thread)", run);
  app.add_flag("--json", o.json, "machine-readable report on stdout")->group(run);
  app.add_flag("--no-check", spelled.no_check, "skip the no-cache recompute")->group(run);
  app.add_flag_callback(
         "--no-progress", [&o] { o.progress = false; }, "no progress lines on stderr")
      ->group(run);
}

// CLI11's messages may span lines; the demo reports one.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

void CheckFlag(const char* flag, std::int64_t value, std::int64_t low, std::int64_t high) {
  if (value < low || value > high) {
    throw Error(fmt::format("[ringkv_demo] {} is {}, expected {}..{}", flag, value, low, high));
  }
}

std::string Bytes(std::uint64_t b) {
  const auto x = static_cast<double>(b);
  if (b >= (std::uint64_t{1} << 40)) return fmt::format("{:.1f} TiB", x / 0x1p40);
  if (b >= (std::uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", x / 0x1p30);
  if (b >= (std::uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", x / 0x1p20);
  return fmt::format("{:.1f} KiB", x / 0x1p10);
}

std::uint64_t U(std::int64_t v) { return static_cast<std::uint64_t>(v); }

}  // namespace

std::int64_t DemoOptions::SequenceTokens() const {
  return std::int64_t{prompt} + decode + turn2_prompt + turn2_decode + draft + long_tokens;
}

std::int64_t DemoOptions::ConversationTokens() const {
  return std::int64_t{system_prompt} + user_turn + serve_decode;
}

DemoCommandLine ParseDemoCommandLine(std::span<const char* const> args) {
  DemoCommandLine out;
  Spelled spelled;
  CLI::App app(kDescription, "ringkv_demo");
  AddFlags(app, out.options, spelled);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    return out;
  } catch (const CLI::ParseError& e) {
    throw Error(fmt::format("[ringkv_demo] {} (try --help)", OneLine(e.what())));
  }
  out.options.check = !spelled.no_check;
  out.options.model.kv_dtype = KvDtype(spelled.kv_dtype);
  ValidateDemoOptions(out.options);
  return out;
}

std::string DemoHelp() {
  DemoOptions defaults;
  Spelled spelled;
  CLI::App app(kDescription, "ringkv_demo");
  AddFlags(app, defaults, spelled);
  return app.help();
}

void ValidateDemoOptions(const DemoOptions& o) {
  const ModelConfig& m = o.model;
  CheckFlag("--layers", m.layers, 1, ModelConfig::kMaxLayers);
  CheckFlag("--d-model", m.d_model, 1, ModelConfig::kMaxDModel);
  CheckFlag("--q-heads", m.q_heads, 1, ModelConfig::kMaxHeads);
  CheckFlag("--kv-heads", m.kv_heads, 1, ModelConfig::kMaxHeads);
  CheckFlag("--head-dim", m.head_dim, 1, ModelConfig::kMaxHeadDim);
  CheckFlag("--mlp", m.mlp_hidden, 1, ModelConfig::kMaxMlpHidden);
  CheckFlag("--vocab", m.vocab, 1, ModelConfig::kMaxVocab);
  CheckFlag("--window", m.window, 1, ModelConfig::kMaxWindow);
  CheckFlag("--global-every", m.global_every, 0, ModelConfig::kMaxLayers);
  if (m.q_heads % m.kv_heads != 0) {
    throw Error(fmt::format("[ringkv_demo] --q-heads {} is not a multiple of --kv-heads {}",
                            m.q_heads, m.kv_heads));
  }
  if (m.head_dim % 2 != 0) {
    throw Error(fmt::format("[ringkv_demo] --head-dim {} must be even (rotary pairs)", m.head_dim));
  }
  if (IsInt4(m.kv_dtype) && m.head_dim % kI4Group != 0) {
    throw Error(fmt::format(
        "[ringkv_demo] --head-dim {} is not a multiple of {}, which --kv-dtype {} needs (one "
        "scale per group of {} values)",
        m.head_dim, kI4Group, m.kv_dtype, kI4Group));
  }
  const std::array<std::pair<const char*, int>, 6> tokens = {{{"--prompt", o.prompt},
                                                              {"--decode", o.decode},
                                                              {"--turn2-prompt", o.turn2_prompt},
                                                              {"--turn2-decode", o.turn2_decode},
                                                              {"--draft", o.draft},
                                                              {"--long", o.long_tokens}}};
  for (const auto& [flag, value] : tokens) CheckFlag(flag, value, 1, DemoOptions::kMaxTokens);
  CheckFlag("--conversations", o.conversations, 0, DemoOptions::kMaxConversations);
  const std::array<std::pair<const char*, int>, 3> serving = {{{"--system-prompt", o.system_prompt},
                                                               {"--user-turn", o.user_turn},
                                                               {"--serve-decode", o.serve_decode}}};
  for (const auto& [flag, value] : serving) CheckFlag(flag, value, 1, DemoOptions::kMaxTokens);
  // A CausalCache's window w shows w + 1 tokens and 0 means none: a sliding
  // window of 1 (the query alone) cannot be served from one (serving_caches.h).
  if (o.conversations > 0 && m.window < 2 && m.GlobalLayers() < m.layers) {
    throw Error(fmt::format(
        "[ringkv_demo] --window {} cannot be served from multi-sequence caches (their window "
        "shows window + 1 tokens): use --window >= 2 or --conversations 0",
        m.window));
  }
  CheckFlag("--threads", o.threads, 0, DemoOptions::kMaxThreads);
  if (!(std::isfinite(o.temperature) && o.temperature >= 0)) {
    throw Error(fmt::format("[ringkv_demo] --temperature is {}, expected a finite value >= 0",
                            o.temperature));
  }
  m.Validate();  // the model's own rules, all met by now
}

DemoMemory EstimateDemoMemory(const DemoOptions& o) {
  const ModelConfig& m = o.model;
  const std::uint64_t sequence = U(o.SequenceTokens());
  // K + V of one token in one layer, scales included; a pool pads a quantized
  // row to 4 bytes.
  const std::uint64_t kv_token = U(m.KvBytesPerToken());
  const DType pool_dtype = PoolDtype(m.kv_dtype);
  const std::uint64_t pool_row = IsQuantized(pool_dtype)
                                     ? (RowBytes(pool_dtype, m.head_dim) + 3) / 4 * 4
                                     : RowBytes(pool_dtype, m.head_dim);
  const std::uint64_t pool_token = U(m.kv_heads) * 2 * pool_row;
  // Rows kept: the last row of turn 1's, turn 2's and the cold prefill, one per
  // decode step, the verification's row per draft token and the accepted ones.
  const std::uint64_t kept =
      3 + U(o.decode) + U(o.turn2_decode) + U(o.long_tokens) + 2 * U(o.draft);
  // The longest forward: the cold prefill of turn 2, or the recompute of everything.
  const std::uint64_t longest = std::max(U(o.prompt) + U(o.decode) + U(o.turn2_prompt),
                                         o.check ? sequence : std::uint64_t{0});
  // The serving scene: the system prompt once, every conversation's own tokens;
  // the user turns' rows of one batch and one row per conversation and step
  // kept; the check recomputes one conversation at a time.
  const std::uint64_t conversations = U(o.conversations);
  const std::uint64_t serving_tokens =
      conversations == 0
          ? 0
          : U(o.system_prompt) + conversations * (U(o.user_turn) + U(o.serve_decode));
  const std::uint64_t serving_kept = conversations * (U(o.user_turn) + 1 + U(o.serve_decode)) +
                                     (o.check && conversations > 0 ? U(o.ConversationTokens()) : 0);
  const std::uint64_t serving_longest =
      conversations == 0 ? 0
                         : std::max({U(o.system_prompt), conversations * U(o.user_turn),
                                     o.check ? U(o.ConversationTokens()) : std::uint64_t{0}});
  const std::uint64_t q = U(m.q_heads) * U(m.head_dim), kv = U(m.kv_heads) * U(m.head_dim);
  DemoMemory out;
  out.weights = U(m.WeightBytes());
  out.kv = U(m.layers) * (sequence * kv_token + serving_tokens * pool_token);
  out.logits = (kept + (o.check ? sequence : 0) + serving_kept) * U(m.vocab) * sizeof(float);
  // Per token: the residual and its norm, q and the attention output, k and v,
  // the MLP's gate and up rows.
  out.activations = std::max(longest, serving_longest) * 2 *
                    (U(m.d_model) + q + kv + U(m.mlp_hidden)) * sizeof(float);
  return out;
}

void CheckDemoMemory(const DemoOptions& o, std::uint64_t available) {
  const DemoMemory need = EstimateDemoMemory(o);
  if (need.Total() <= available) return;
  const ModelConfig& m = o.model;
  const std::string tokens = fmt::format(
      "{} tokens (--prompt {} --decode {} --turn2-prompt {} --turn2-decode {} --draft {} "
      "--long {})",
      o.SequenceTokens(), o.prompt, o.decode, o.turn2_prompt, o.turn2_decode, o.draft,
      o.long_tokens);
  const std::array<std::pair<std::uint64_t, std::string>, 4> parts = {{
      {need.weights,
       fmt::format("the f32 weights, {}, from --layers {} --d-model {} --q-heads {} --kv-heads {} "
                   "--head-dim {} --mlp {} --vocab {}",
                   Bytes(need.weights), m.layers, m.d_model, m.q_heads, m.kv_heads, m.head_dim,
                   m.mlp_hidden, m.vocab)},
      {need.kv, fmt::format("K/V, {}, from --layers {} --kv-heads {} --head-dim {} --kv-dtype {} "
                            "and {}",
                            Bytes(need.kv), m.layers, m.kv_heads, m.head_dim, m.kv_dtype, tokens)},
      {need.logits, fmt::format("logit rows, {}, from --vocab {} and {}{}", Bytes(need.logits),
                                m.vocab, tokens, o.check ? " (--no-check keeps fewer)" : "")},
      {need.activations,
       fmt::format("activations, {}, from --d-model {} --q-heads {} --head-dim {} --mlp {} and {}",
                   Bytes(need.activations), m.d_model, m.q_heads, m.head_dim, m.mlp_hidden,
                   tokens)},
  }};
  const auto largest = std::max_element(
      parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  throw Error(fmt::format(
      "[ringkv_demo] the run needs about {}, more than the {} of memory on this machine; most "
      "of it is {}",
      Bytes(need.Total()), Bytes(available), largest->second));
}

std::uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0)
    return std::numeric_limits<std::uint64_t>::max();  // unknown: let the allocator decide
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace ringkv::model
