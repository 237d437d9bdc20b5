#pragma once
// The decode demo's command line (CLI11: `--layers=3` and `--layers 3` alike),
// the bounds every flag must meet, and the memory the run needs, all checked
// before anything is allocated, so that a bad configuration ends in one line
// naming the flag and its value rather than in std::bad_alloc.

#include <cstdint>
#include <span>
#include <string>

#include "model_config.h"

namespace ringkv::model {

struct DemoOptions {
  ModelConfig model;
  int threads = 0;        // 0: one per hardware thread
  int prompt = 512;       // turn 1 prompt tokens
  int decode = 64;        // turn 1 generated tokens
  int turn2_prompt = 64;  // turn 2's new prompt tokens
  int turn2_decode = 32;  // turn 2 generated tokens
  int draft = 6;          // speculative tokens
  int long_tokens = 768;  // the long generation: 6 wraps of the default window
  // The serving scene: conversations sharing a system prompt, decoded in one batch.
  int conversations = 4;    // 0: no serving scene
  int system_prompt = 256;  // tokens, prefilled once
  int user_turn = 32;       // each conversation's own tokens
  int serve_decode = 32;    // batched steps, one token per conversation each
  float temperature = 0;    // 0: greedy
  int prompt_seed = 42;
  bool json = false;
  bool check = true;
  bool progress = true;

  // Upper bounds of the token-count flags and of --threads: together the counts
  // stay far below INT_MAX positions.
  static constexpr int kMaxTokens = 1 << 24;
  static constexpr int kMaxThreads = 1024;
  static constexpr int kMaxConversations = 256;

  // Every token the run feeds at most (the draft counted in full).
  std::int64_t SequenceTokens() const;
  // One serving conversation's tokens: system prompt, user turn, decoded ones.
  std::int64_t ConversationTokens() const;
};

struct DemoCommandLine {
  DemoOptions options;
  bool help = false;  // --help or -h: print DemoHelp() and run nothing
};

// `args` is argv: the program name, then the flags. Throws ringkv::Error
// "[ringkv_demo] ..." (one line naming the flag and the value) for an unknown
// flag, a value that does not parse, a missing value, or one out of bounds
// (ValidateDemoOptions). Does not check memory (CheckDemoMemory).
DemoCommandLine ParseDemoCommandLine(std::span<const char* const> args);

// The --help text.
std::string DemoHelp();

// Throws ringkv::Error naming the flag and value of the first option out of its
// bounds or inconsistent with another (e.g. --q-heads not a multiple of --kv-heads).
void ValidateDemoOptions(const DemoOptions& o);

// What the run holds at its peak, roughly (bytes): the f32 weights; K/V of every
// layer for the whole sequence; the logit rows the demo keeps (one per step, the
// draft's, and the check's recompute of every position); the largest forward's
// activations.
struct DemoMemory {
  std::uint64_t weights = 0;
  std::uint64_t kv = 0;
  std::uint64_t logits = 0;
  std::uint64_t activations = 0;

  std::uint64_t Total() const { return weights + kv + logits + activations; }
};
// `o` must have passed ValidateDemoOptions (the bounds keep every product in range).
DemoMemory EstimateDemoMemory(const DemoOptions& o);

// Throws ringkv::Error when EstimateDemoMemory(o) exceeds `available` bytes,
// naming the flags and values behind the largest part.
void CheckDemoMemory(const DemoOptions& o, std::uint64_t available);

// The machine's physical memory (sysconf).
std::uint64_t PhysicalMemoryBytes();

}  // namespace ringkv::model
