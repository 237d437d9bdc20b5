// The demo's command line: both spellings of every flag (`--layers=3` and
// `--layers 3`), the documented defaults, and refusals that name the flag and
// its value before anything is allocated (a huge --vocab used to end in an
// uncaught std::bad_alloc).
#include "demo_options.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ringkv/error.h"

namespace ringkv::model::test {
namespace {

DemoCommandLine Parse(const std::vector<std::string>& flags) {
  std::vector<const char*> argv = {"ringkv_demo"};
  for (const std::string& f : flags) argv.push_back(f.c_str());
  return ParseDemoCommandLine(argv);
}

// The message of the ringkv::Error that parsing `flags` throws ("" when none).
std::string ParseError(const std::vector<std::string>& flags) {
  try {
    (void)Parse(flags);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A value for every option flag, none of them its default, and where each lands.
struct FlagValue {
  const char* flag;
  const char* value;
};
const std::vector<FlagValue> kEveryFlag = {
    {"--layers", "3"},         {"--d-model", "64"},        {"--q-heads", "4"},
    {"--kv-heads", "1"},       {"--head-dim", "16"},       {"--mlp", "96"},
    {"--vocab", "97"},         {"--window", "9"},          {"--global-every", "2"},
    {"--kv-dtype", "bf16"},    {"--seed", "123456789012"}, {"--prompt", "21"},
    {"--decode", "7"},         {"--turn2-prompt", "5"},    {"--turn2-decode", "3"},
    {"--draft", "4"},          {"--long", "41"},           {"--temperature", "0.5"},
    {"--prompt-seed", "7"},    {"--threads", "2"},         {"--conversations", "3"},
    {"--system-prompt", "11"}, {"--user-turn", "6"},       {"--serve-decode", "9"}};

void ExpectEveryFlagApplied(const DemoOptions& o) {
  EXPECT_EQ(o.model.layers, 3);
  EXPECT_EQ(o.model.d_model, 64);
  EXPECT_EQ(o.model.q_heads, 4);
  EXPECT_EQ(o.model.kv_heads, 1);
  EXPECT_EQ(o.model.head_dim, 16);
  EXPECT_EQ(o.model.mlp_hidden, 96);
  EXPECT_EQ(o.model.vocab, 97);
  EXPECT_EQ(o.model.window, 9);
  EXPECT_EQ(o.model.global_every, 2);
  EXPECT_EQ(o.model.kv_dtype, DType::kBF16);
  EXPECT_EQ(o.model.seed, std::uint64_t{123456789012});
  EXPECT_EQ(o.prompt, 21);
  EXPECT_EQ(o.decode, 7);
  EXPECT_EQ(o.turn2_prompt, 5);
  EXPECT_EQ(o.turn2_decode, 3);
  EXPECT_EQ(o.draft, 4);
  EXPECT_EQ(o.long_tokens, 41);
  EXPECT_EQ(o.temperature, 0.5f);
  EXPECT_EQ(o.prompt_seed, 7);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.conversations, 3);
  EXPECT_EQ(o.system_prompt, 11);
  EXPECT_EQ(o.user_turn, 6);
  EXPECT_EQ(o.serve_decode, 9);
  EXPECT_TRUE(o.json);
  EXPECT_FALSE(o.check);
  EXPECT_FALSE(o.progress);
}

TEST(DemoOptions, DefaultsAreTheDocumentedOnes) {
  const DemoCommandLine cl = Parse({});
  EXPECT_FALSE(cl.help);
  const DemoOptions& o = cl.options;
  EXPECT_EQ(o.model.layers, 8);
  EXPECT_EQ(o.model.d_model, 512);
  EXPECT_EQ(o.model.q_heads, 8);
  EXPECT_EQ(o.model.kv_heads, 2);
  EXPECT_EQ(o.model.head_dim, 64);
  EXPECT_EQ(o.model.mlp_hidden, 1536);
  EXPECT_EQ(o.model.vocab, 4096);
  EXPECT_EQ(o.model.window, 128);
  EXPECT_EQ(o.model.global_every, 4);
  EXPECT_EQ(o.model.kv_dtype, DType::kF16);
  EXPECT_EQ(o.model.seed, std::uint64_t{1});
  EXPECT_EQ(o.prompt, 512);
  EXPECT_EQ(o.decode, 64);
  EXPECT_EQ(o.turn2_prompt, 64);
  EXPECT_EQ(o.turn2_decode, 32);
  EXPECT_EQ(o.draft, 6);
  EXPECT_EQ(o.long_tokens, 768);
  EXPECT_EQ(o.temperature, 0.0f);
  EXPECT_EQ(o.prompt_seed, 42);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.conversations, 4);
  EXPECT_EQ(o.system_prompt, 256);
  EXPECT_EQ(o.user_turn, 32);
  EXPECT_EQ(o.serve_decode, 32);
  EXPECT_FALSE(o.json);
  EXPECT_TRUE(o.check);
  EXPECT_TRUE(o.progress);
}

TEST(DemoOptions, EveryFlagWithAnEqualsSign) {
  std::vector<std::string> flags;
  for (const FlagValue& f : kEveryFlag) flags.push_back(std::string(f.flag) + "=" + f.value);
  flags.insert(flags.end(), {"--json", "--no-check", "--no-progress"});
  ExpectEveryFlagApplied(Parse(flags).options);
}

TEST(DemoOptions, EveryFlagWithItsValueInTheNextArgument) {
  std::vector<std::string> flags;
  for (const FlagValue& f : kEveryFlag) flags.insert(flags.end(), {f.flag, f.value});
  flags.insert(flags.end(), {"--json", "--no-check", "--no-progress"});
  ExpectEveryFlagApplied(Parse(flags).options);
}

TEST(DemoOptions, Help) {
  EXPECT_TRUE(Parse({"--help"}).help);
  EXPECT_TRUE(Parse({"-h"}).help);
  const std::string help = DemoHelp();
  for (const FlagValue& f : kEveryFlag) EXPECT_NE(help.find(f.flag), std::string::npos) << f.flag;
  for (const char* flag : {"--json", "--no-check", "--no-progress", "--help"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

TEST(DemoOptions, HugeVocabIsRefusedNamingTheFlagAndValue) {
  const std::string message = ParseError({"--vocab=1000000000"});
  EXPECT_NE(message.find("--vocab"), std::string::npos) << message;
  EXPECT_NE(message.find("1000000000"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(DemoOptions, EverySizeFlagIsBounded) {
  struct Case {
    const char* flag;
    const char* value;
  };
  for (const Case& c : std::vector<Case>{{"--layers", "0"},
                                         {"--layers", "100000"},
                                         {"--d-model", "0"},
                                         {"--d-model", "1000000"},
                                         {"--q-heads", "0"},
                                         {"--q-heads", "100000"},
                                         {"--kv-heads", "0"},
                                         {"--head-dim", "0"},
                                         {"--head-dim", "100000"},
                                         {"--mlp", "0"},
                                         {"--mlp", "100000000"},
                                         {"--vocab", "0"},
                                         {"--vocab", "-5"},
                                         {"--window", "0"},
                                         {"--window", "1000000000"},
                                         {"--global-every", "-1"},
                                         {"--global-every", "100000"},
                                         {"--prompt", "0"},
                                         {"--prompt", "1000000000"},
                                         {"--decode", "0"},
                                         {"--turn2-prompt", "0"},
                                         {"--turn2-decode", "0"},
                                         {"--draft", "0"},
                                         {"--draft", "1000000000"},
                                         {"--long", "0"},
                                         {"--long", "1000000000"},
                                         {"--conversations", "-1"},
                                         {"--conversations", "100000"},
                                         {"--system-prompt", "0"},
                                         {"--user-turn", "0"},
                                         {"--serve-decode", "0"},
                                         {"--serve-decode", "1000000000"},
                                         {"--threads", "-1"},
                                         {"--threads", "100000"},
                                         {"--temperature", "-1"},
                                         {"--temperature", "nan"},
                                         {"--temperature", "inf"}}) {
    const std::string message = ParseError({std::string(c.flag) + "=" + c.value});
    EXPECT_NE(message.find(c.flag), std::string::npos)
        << c.flag << " " << c.value << ": " << message;
    EXPECT_NE(message.find(c.value), std::string::npos)
        << c.flag << " " << c.value << ": " << message;
  }
}

TEST(DemoOptions, InconsistentSizesNameBothFlags) {
  const std::string heads = ParseError({"--q-heads", "8", "--kv-heads", "3"});
  for (const char* piece : {"--q-heads", "8", "--kv-heads", "3"}) {
    EXPECT_NE(heads.find(piece), std::string::npos) << heads;
  }
  const std::string dim = ParseError({"--head-dim", "15"});
  EXPECT_NE(dim.find("--head-dim"), std::string::npos) << dim;
  EXPECT_NE(dim.find("15"), std::string::npos) << dim;
  // A sliding window of 1 has no multi-sequence equivalent (serving_caches.h):
  // refused for the serving scene, accepted without it or without sliding layers.
  const std::string window = ParseError({"--window", "1"});
  for (const char* piece : {"--window", "1", "--conversations"}) {
    EXPECT_NE(window.find(piece), std::string::npos) << window;
  }
  EXPECT_EQ(ParseError({"--window", "1", "--conversations", "0"}), "");
  EXPECT_EQ(ParseError({"--window", "1", "--global-every", "1"}), "");
}

TEST(DemoOptions, MalformedFlagsAreRefused) {
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--layers"},
                                             {"--layers", "three"},
                                             {"--layers=3x"},
                                             {"--layers=99999999999"},
                                             {"--kv-dtype=f64"},
                                             {"--seed=-1"},
                                             {"--seed=18446744073709551616"},
                                             {"--no-such-flag"},
                                             {"stray"}}) {
    const std::string message = ParseError(flags);
    EXPECT_NE(message.find("[ringkv_demo]"), std::string::npos) << flags[0] << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// The estimate the memory check uses, against the sizes counted by hand for a
// small configuration.
TEST(DemoMemory, EstimateOfASmallRun) {
  DemoOptions o =
      Parse({"--layers=2", "--d-model=8", "--q-heads=2", "--kv-heads=1", "--head-dim=4", "--mlp=16",
             "--vocab=10", "--prompt=5", "--decode=2", "--turn2-prompt=3", "--turn2-decode=2",
             "--draft=3", "--long=6", "--kv-dtype=f32", "--conversations=0"})
          .options;
  // Per layer: wq 8x8, wk 4x8, wv 4x8, wo 8x8, gate/up 16x8 each, down 8x16, two norms of 8.
  const std::uint64_t per_layer = 64 + 32 + 32 + 64 + 3 * 128 + 16;
  const std::uint64_t params = 2 * per_layer + 2 * 10 * 8 + 8;  // + embedding, lm head, final norm
  const std::uint64_t sequence = 5 + 2 + 3 + 2 + 3 + 6;
  DemoMemory m = EstimateDemoMemory(o);
  EXPECT_EQ(m.weights, params * 4);
  EXPECT_EQ(m.kv, 2 * sequence * (1 * 4 * 2 * 4));  // layers x tokens x (K + V of one token)
  // Rows kept: the last row of turn 1's, turn 2's and the cold prefill, one per decode step, and
  // two per draft token (the verification's rows and the accepted ones); with the check, the
  // recompute's row for every token.
  const std::uint64_t kept = 3 + 2 + 2 + 6 + 2 * 3;
  EXPECT_EQ(m.logits, (kept + sequence) * 10 * 4);
  EXPECT_EQ(m.Total(), m.weights + m.kv + m.logits + m.activations);
  EXPECT_GT(m.activations, 0u);

  o.check = false;  // no recompute: only the kept rows
  m = EstimateDemoMemory(o);
  EXPECT_EQ(m.logits, kept * 10 * 4);

  // The serving scene: 3 conversations, a 4-token system prompt held once, 2 user
  // and 5 decoded tokens each; rows kept: each user turn's batch rows and one per
  // step, plus (with the check) one conversation's recompute at a time.
  o.check = true;
  o.conversations = 3;
  o.system_prompt = 4;
  o.user_turn = 2;
  o.serve_decode = 5;
  const DemoMemory serving = EstimateDemoMemory(o);
  EXPECT_EQ(serving.kv, 2 * (sequence + 4 + 3 * (2 + 5)) * (1 * 4 * 2 * 4));
  EXPECT_EQ(serving.logits, (kept + sequence + 3 * (2 + 1 + 5) + (4 + 2 + 5)) * 10 * 4);
}

// Every storage dtype by name; int4 and int4h need a head dim of whole groups of 32.
TEST(DemoOptions, KvDtypeTakesEveryStorageDtype) {
  const std::vector<std::pair<std::string, DType>> names = {
      {"f32", DType::kF32}, {"f16", DType::kF16}, {"bf16", DType::kBF16},
      {"int8", DType::kI8}, {"int4", DType::kI4}, {"int4h", DType::kI4H}};
  for (const auto& [name, dtype] : names) {
    EXPECT_EQ(Parse({"--kv-dtype", name, "--head-dim", "32"}).options.model.kv_dtype, dtype)
        << name;
  }
  EXPECT_EQ(Parse({"--kv-dtype=int8", "--head-dim=6"}).options.model.kv_dtype, DType::kI8);
  const std::string int4 = ParseError({"--kv-dtype", "int4", "--head-dim", "48"});
  for (const char* piece :
       {"[ringkv_demo]", "--head-dim 48", "multiple of 32", "--kv-dtype int4"}) {
    EXPECT_NE(int4.find(piece), std::string::npos) << int4;
  }
  const std::string int4h = ParseError({"--kv-dtype", "int4h", "--head-dim", "40"});
  EXPECT_NE(int4h.find("--head-dim 40 is not a multiple of 32, which --kv-dtype int4h needs"),
            std::string::npos)
      << int4h;
  // The default head dim (64) holds two groups.
  EXPECT_EQ(ParseError({"--kv-dtype", "int4"}), "");
  EXPECT_EQ(ParseError({"--kv-dtype", "int4h"}), "");
  const std::string unknown = ParseError({"--kv-dtype", "int2"});
  EXPECT_NE(unknown.find("int2"), std::string::npos) << unknown;
  EXPECT_NE(DemoHelp().find("f32, f16, bf16, int8, int4 or int4h"), std::string::npos);
}

// K/V bytes per token from RowBytes (scales included); the serving pools store
// f16 for a quantized dtype.
TEST(DemoMemory, QuantizedKvCountsRowBytes) {
  const std::vector<std::string> flags = {
      "--layers=2",      "--d-model=8",       "--q-heads=2",       "--kv-heads=1",
      "--head-dim=32",   "--mlp=16",          "--vocab=10",        "--prompt=5",
      "--decode=2",      "--turn2-prompt=3",  "--turn2-decode=2",  "--draft=3",
      "--long=6",        "--conversations=3", "--system-prompt=4", "--user-turn=2",
      "--serve-decode=5"};
  const std::uint64_t sequence = 5 + 2 + 3 + 2 + 3 + 6, serving = 4 + 3 * (2 + 5);
  const std::uint64_t f16_pool = 2 * 32 * 2;  // K + V rows of 32 f16 values
  std::vector<std::string> with = flags;
  with.push_back("--kv-dtype=int8");
  // int8: 32 bytes of data + one f32 scale a row, in the caches and the pools alike.
  EXPECT_EQ(EstimateDemoMemory(Parse(with).options).kv, 2 * (sequence + serving) * 2 * (32 + 4));
  with.back() = "--kv-dtype=int4";
  // int4: 16 bytes of nibbles + one scale for the one group of 32.
  EXPECT_EQ(EstimateDemoMemory(Parse(with).options).kv, 2 * (sequence + serving) * 2 * (16 + 4));
  // An int8 row of 30 values is 34 bytes; a pool pads it to 36.
  with.back() = "--kv-dtype=int8";
  with[4] = "--head-dim=30";
  EXPECT_EQ(EstimateDemoMemory(Parse(with).options).kv,
            2 * (sequence * 2 * (30 + 4) + serving * 2 * 36));
  with[4] = "--head-dim=32";
  with.back() = "--kv-dtype=bf16";
  EXPECT_EQ(EstimateDemoMemory(Parse(with).options).kv, 2 * (sequence + serving) * f16_pool);
}

TEST(DemoMemory, RunsThatDoNotFitAreRefusedNamingTheFlags) {
  const DemoOptions defaults = Parse({}).options;
  const std::uint64_t need = EstimateDemoMemory(defaults).Total();
  EXPECT_NO_THROW(CheckDemoMemory(defaults, need));
  try {
    CheckDemoMemory(defaults, need - 1);
    ADD_FAILURE() << "a run one byte over the memory must be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    // The weights dominate the default run: their flags and values are named.
    for (const char* piece : {"[ringkv_demo]", "--vocab 4096", "--d-model 512", "--layers 8"}) {
      EXPECT_NE(message.find(piece), std::string::npos) << message;
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }

  // Within every flag's bound, but terabytes of weights: refused on any machine.
  const DemoOptions huge = Parse({"--vocab=16777216", "--d-model=65536"}).options;
  EXPECT_GT(EstimateDemoMemory(huge).weights, std::uint64_t{1} << 42);
  EXPECT_THROW(CheckDemoMemory(huge, PhysicalMemoryBytes()), Error);
}

}  // namespace
}  // namespace ringkv::model::test
