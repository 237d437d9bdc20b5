#pragma once
// What the decode demo measured, and its two renderings: a report a person reads
// at a glance, and JSON for scripts (ringkv_demo --json; docs/decode_demo.md
// lists the fields).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "forward_stats.h"
#include "model_config.h"
#include "ringkv/kernels/isa.h"

namespace ringkv::model {

// Cached and recomputed logits must agree within this (see tests/model) ...
constexpr double kLogitTolerance = 1e-3;
// ... or these with quantized K/V on a tier that rounds queries and softmax
// weights to int16 (kernels::RoundsQuantizedToInt16): the cached decode and the
// recompute round differently, and a difference can move a K/V value of a later
// layer by one quantization step, 1/127 (int8) or 1/7 (int4) of its row's or
// group's largest. Measured up to 1.9e-3 (int8) and 1.8e-2 (int4h) here, 5.1e-2
// (int4) in tests/model.
constexpr double kLogitToleranceInt16 = 5e-3;
constexpr double kLogitToleranceInt4Int16 = 0.15;
// ... or this with bf16 K/V on a tier that rounds the softmax weights to bf16
// (kernels::RoundsBf16Weights), against each block's running max, which differs
// between the cached decode and the recompute: measured up to 1.7e-3 here, 4.2e-3
// in tests/model.
constexpr double kLogitToleranceBf16Weights = 5e-3;
double LogitTolerance(DType kv_dtype, kernels::Isa tier);

// The demo's exit codes (docs/decode_demo.md): 0 when the check passed or was
// skipped (--no-check), otherwise these.
constexpr int kExitCheckFailed = 1;
constexpr int kExitBadConfiguration = 2;  // a flag refused before anything ran
constexpr int kExitRunFailed = 3;         // an error during the run, e.g. out of memory

enum class CheckVerdict : std::uint8_t { kSkipped, kPassed, kFailed };

struct SpeculationReport {
  int drafted = 0;
  int wrong_index = 0;  // the draft token replaced on purpose
  int accepted = 0;
  int offset_before = 0;
  int offset_during_global = 0;   // live KVCache offset during verification (written through)
  int offset_during_sliding = 0;  // live RotatingKVCache offset (untouched until Commit)
  int offset_after_min = 0;       // every layer after Commit(accepted)
  int offset_after_max = 0;
  double draft_seconds = 0;
  double verify_seconds = 0;  // the one verification forward and the commit
};

struct CheckReport {
  bool ran = false;
  std::int64_t positions = 0;  // logit rows compared
  std::int64_t sequence = 0;   // tokens recomputed
  double max_abs_diff = 0;
  double recompute_seconds = 0;
};

// What the K/V dtype costs: the cached run's logit rows against a no-cache
// recompute with the model's f32 K/V, not rounded (for f32 K/V, the check's own
// recompute). Measured, not checked: it is the rounding the dtype is for.
struct KvCostReport {
  bool ran = false;
  std::int64_t positions = 0;  // logit rows compared
  double max_abs_diff = 0;
  double mean_abs_diff = 0;         // over every logit of every compared row
  std::int64_t greedy_differs = 0;  // rows whose argmax differs
  double recompute_seconds = 0;

  double GreedyDiffersFraction() const {
    return positions > 0 ? static_cast<double>(greedy_differs) / static_cast<double>(positions) : 0;
  }
};

// The serving scene: conversations sharing a system prompt, served from
// multi-sequence caches (serving_scene.h).
struct ServingReport {
  int conversations = 0;  // 0: the scene did not run
  int system_tokens = 0;  // prefilled once, then CopyPrefix'ed
  int user_tokens = 0;    // per conversation, all prefilled in one batch
  int steps = 0;          // batched decode steps, one token per conversation
  // What the pools store: the model's K/V dtype (serving_caches.h PoolDtype).
  DType pool_dtype = DType::kF16;
  ForwardStats system_prefill, user_prefill, decode;
  std::size_t used_bytes = 0;      // both pools' used blocks at the end (shared ones once)
  std::size_t separate_bytes = 0;  // the same tokens with every sequence in blocks of its own
  // The no-cache recompute check, per conversation (empty when it did not run).
  std::vector<double> max_abs_diff;
  std::int64_t positions = 0;  // logit rows compared, all conversations
  double recompute_seconds = 0;

  bool Checked() const { return !max_abs_diff.empty(); }
  double MaxDiff() const;  // over the conversations (NaN if any is NaN)
};

struct DemoReport {
  ModelConfig config;
  std::string isa;
  int threads = 0;
  double logit_tolerance = kLogitTolerance;  // LogitTolerance of the run

  ForwardStats turn1_prefill, turn1_decode;
  std::size_t snapshot_bytes = 0;
  int snapshot_tokens = 0;
  double snapshot_seconds = 0;

  ForwardStats turn2_prefill, turn2_decode;
  double restore_seconds = 0;
  double cold_prefill_seconds = 0;
  std::int64_t cold_tokens = 0;
  std::vector<float> cold_logits;  // last row of the cold prefill
  double warm_vs_cold_diff = 0;    // against the warm (restored) path's row

  SpeculationReport speculation;

  ForwardStats long_decode;
  int long_offset_start = 0;
  int final_offset = 0;
  std::size_t sliding_bytes_min = 0;  // over the long generation, all sliding layers
  std::size_t sliding_bytes_max = 0;
  std::size_t sliding_bytes = 0;  // at the end
  std::size_t global_bytes = 0;   // at the end, all global layers

  ServingReport serving;

  CheckReport check;
  KvCostReport kv_cost;

  // K + V bytes one token takes in one layer (ModelConfig::KvBytesPerToken).
  std::size_t BytesPerToken() const;
  // What the sliding layers may hold at most: window plus the longest single
  // forward, rounded up to storage blocks.
  std::size_t SlidingBound() const;
  // Failed when the main check or the serving scene's exceeds logit_tolerance.
  CheckVerdict Verdict() const;
};

std::string ToText(const DemoReport& r);
// One JSON object (nlohmann::json); a skipped check is {"status": "skipped",
// "passed": null} with no measurements.
std::string ToJson(const DemoReport& r);
// 0 unless the check ran and failed (kExitCheckFailed).
int ExitCode(const DemoReport& r);

}  // namespace ringkv::model
