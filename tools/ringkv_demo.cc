// The main job: a decode loop of a tiny transformer (random weights) on ringkv's
// caches. Turn 1 prefills a prompt, decodes and snapshots the caches; turn 2
// shares turn 1's prefix, restores the snapshot instead of re-prefilling and
// continues; a speculative step verifies an imperfect draft in one forward and
// commits the accepted prefix; a long generation wraps the sliding window many
// times. Finally every recorded logit row is compared with a no-cache recompute
// of the whole sequence. A serving scene then decodes several conversations that
// share a system prompt together in one batch from multi-sequence caches, each
// checked against its own recompute. docs/decode_demo.md explains the report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "demo_options.h"
#include "demo_report.h"
#include "model_caches.h"
#include "progress.h"
#include "recompute.h"
#include "ringkv/context.h"
#include "ringkv/error.h"
#include "ringkv/speculation.h"
#include "sampling.h"
#include "serving_scene.h"
#include "tiny_transformer.h"

namespace {

using ringkv::model::ForwardStats;
using ringkv::model::LayerKind;
using ringkv::model::LogitRows;
using ringkv::model::ModelCaches;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int> PromptTokens(int n, int vocab, std::uint64_t seed) {
  std::vector<int> out(static_cast<std::size_t>(n));
  std::uint64_t state = seed;
  for (int& t : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // LCG, top bits
    t = static_cast<int>((state >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return out;
}

// The tokens of the conversation so far and the logit rows the cached model
// produced, by position (row p predicts token p + 1).
struct Transcript {
  std::vector<int> tokens;
  std::vector<int> positions;
  std::vector<float> rows;  // [positions, vocab]
  std::vector<float> last;  // the newest row

  void Record(int position, std::span<const float> row) {
    positions.push_back(position);
    rows.insert(rows.end(), row.begin(), row.end());
    last.assign(row.begin(), row.end());
  }
};

class Demo {
 public:
  explicit Demo(const ringkv::model::DemoOptions& o)
      : o_(o),
        ctx_(o.threads),
        model_(o.model, ctx_),
        sampler_(o.temperature, static_cast<std::uint64_t>(o.prompt_seed)) {}

  ringkv::model::DemoReport Run();

 private:
  // One forward on `caches`, recording the last row (or every row).
  std::vector<float> Feed(ModelCaches& caches, std::span<const int> tokens, ForwardStats& stats,
                          bool all_rows = false);
  void Decode(ModelCaches& caches, int steps, ForwardStats& stats, const char* label,
              const std::function<void()>& after_step = {});
  void Speculate(ModelCaches& caches, ringkv::model::DemoReport& r);
  void Check(ringkv::model::DemoReport& r);
  // The cost of the K/V dtype: the cached rows against `reference`, a recompute
  // with f32 K/V.
  void MeasureKvCost(std::span<const float> reference, ringkv::model::KvCostReport& cost) const;
  void Serve(ringkv::model::DemoReport& r);

  const ringkv::model::DemoOptions& o_;
  ringkv::Context ctx_;
  ringkv::model::TinyTransformer model_;
  ringkv::model::Sampler sampler_;
  Transcript t_;
};

std::vector<float> Demo::Feed(ModelCaches& caches, std::span<const int> tokens, ForwardStats& stats,
                              bool all_rows) {
  const int start = caches.Offset();
  std::vector<float> rows = model_.Forward(tokens, caches.Layers(), ctx_,
                                           all_rows ? LogitRows::kAll : LogitRows::kLast, &stats);
  t_.tokens.resize(static_cast<std::size_t>(start));
  t_.tokens.insert(t_.tokens.end(), tokens.begin(), tokens.end());
  const auto vocab = static_cast<std::size_t>(o_.model.vocab);
  if (!all_rows) {
    t_.Record(start + static_cast<int>(tokens.size()) - 1, rows);
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      t_.Record(start + static_cast<int>(i),
                std::span<const float>(rows).subspan(i * vocab, vocab));
    }
  }
  return rows;
}

void Demo::Decode(ModelCaches& caches, int steps, ForwardStats& stats, const char* label,
                  const std::function<void()>& after_step) {
  ringkv::model::Progress progress(label, steps, o_.progress);
  for (int i = 0; i < steps; ++i) {
    const int next = sampler_.Next(t_.last);
    Feed(caches, std::span<const int>(&next, 1), stats);
    if (after_step) after_step();
    progress.Update(i + 1);
  }
}

void Demo::Speculate(ModelCaches& caches, ringkv::model::DemoReport& r) {
  auto& s = r.speculation;
  s.drafted = o_.draft;
  s.offset_before = caches.Offset();
  // The draft: the target's own greedy continuation on copy-on-write forks of the
  // caches (a perfect drafter), then one token deliberately replaced, as an
  // imperfect small draft model would get it wrong.
  const auto draft_start = Clock::now();
  ModelCaches fork = caches.Fork();
  std::vector<int> draft;
  std::vector<float> row = t_.last;
  for (int i = 0; i < o_.draft; ++i) {
    draft.push_back(ringkv::model::Greedy(row));
    row = model_.Forward(std::span<const int>(&draft.back(), 1), fork.Layers(), ctx_);
  }
  s.wrong_index = o_.draft * 2 / 3;
  auto& wrong = draft[static_cast<std::size_t>(s.wrong_index)];
  wrong = (wrong + 1) % o_.model.vocab;
  s.draft_seconds = Since(draft_start);

  // Verify all drafted tokens in one forward through the speculation wrappers.
  const auto verify_start = Clock::now();
  ringkv::Speculation spec = ringkv::BeginSpeculation(caches.Layers());
  ForwardStats stats;
  const std::vector<float> rows =
      model_.Forward(draft, spec.Caches(), ctx_, LogitRows::kAll, &stats);
  for (int layer = 0; layer < o_.model.layers; ++layer) {
    (caches.Kind(layer) == LayerKind::kGlobal ? s.offset_during_global : s.offset_during_sliding) =
        caches.Layer(layer).Offset();
  }
  const auto vocab = static_cast<std::size_t>(o_.model.vocab);
  int expected = ringkv::model::Greedy(t_.last);
  int accepted = 0;
  while (accepted < o_.draft && draft[static_cast<std::size_t>(accepted)] == expected) {
    expected = ringkv::model::Greedy(
        std::span<const float>(rows).subspan(static_cast<std::size_t>(accepted) * vocab, vocab));
    ++accepted;
  }
  spec.Commit(accepted);
  s.verify_seconds = Since(verify_start);
  s.accepted = accepted;
  s.offset_after_min = s.offset_after_max = caches.Offset();
  for (int layer = 0; layer < o_.model.layers; ++layer) {
    s.offset_after_min = std::min(s.offset_after_min, caches.Layer(layer).Offset());
    s.offset_after_max = std::max(s.offset_after_max, caches.Layer(layer).Offset());
  }
  t_.tokens.resize(static_cast<std::size_t>(s.offset_before));
  for (int i = 0; i < accepted; ++i) {
    t_.tokens.push_back(draft[static_cast<std::size_t>(i)]);
    t_.Record(s.offset_before + i,
              std::span<const float>(rows).subspan(static_cast<std::size_t>(i) * vocab, vocab));
  }
}

void Demo::Check(ringkv::model::DemoReport& r) {
  const auto start = Clock::now();
  std::vector<float> reference = ringkv::model::RecomputeLogits(model_, t_.tokens, ctx_);
  r.check.recompute_seconds = Since(start);
  const auto vocab = static_cast<std::size_t>(o_.model.vocab);
  float worst = 0;
  for (std::size_t i = 0; i < t_.positions.size(); ++i) {
    const auto p = static_cast<std::size_t>(t_.positions[i]);
    for (std::size_t j = 0; j < vocab; ++j) {
      worst = std::max(worst, std::abs(t_.rows[i * vocab + j] - reference[p * vocab + j]));
    }
  }
  r.check.ran = true;
  r.check.positions = static_cast<std::int64_t>(t_.positions.size());
  r.check.sequence = static_cast<std::int64_t>(t_.tokens.size());
  r.check.max_abs_diff = static_cast<double>(worst);

  // With f32 K/V the check's recompute is already unrounded; otherwise one more,
  // after the first is dropped (the memory estimate holds one).
  if (o_.model.kv_dtype == ringkv::DType::kF32) {
    r.kv_cost.recompute_seconds = r.check.recompute_seconds;
    MeasureKvCost(reference, r.kv_cost);
    return;
  }
  std::vector<float>().swap(reference);
  const auto cost_start = Clock::now();
  const std::vector<float> unrounded =
      ringkv::model::RecomputeLogits(model_, t_.tokens, ctx_, ringkv::DType::kF32);
  r.kv_cost.recompute_seconds = Since(cost_start);
  MeasureKvCost(unrounded, r.kv_cost);
}

void Demo::MeasureKvCost(std::span<const float> reference,
                         ringkv::model::KvCostReport& cost) const {
  const auto vocab = static_cast<std::size_t>(o_.model.vocab);
  double worst = 0, sum = 0;
  for (std::size_t i = 0; i < t_.positions.size(); ++i) {
    const auto p = static_cast<std::size_t>(t_.positions[i]);
    const std::span<const float> row = std::span<const float>(t_.rows).subspan(i * vocab, vocab);
    const std::span<const float> ref = reference.subspan(p * vocab, vocab);
    for (std::size_t j = 0; j < vocab; ++j) {
      const double d = std::abs(static_cast<double>(row[j]) - static_cast<double>(ref[j]));
      if (std::isnan(d) || d > worst) worst = d;  // a NaN stays
      sum += d;
    }
    cost.greedy_differs += ringkv::model::Greedy(row) != ringkv::model::Greedy(ref) ? 1 : 0;
  }
  cost.ran = true;
  cost.positions = static_cast<std::int64_t>(t_.positions.size());
  cost.max_abs_diff = worst;
  cost.mean_abs_diff =
      t_.positions.empty() ? 0 : sum / static_cast<double>(t_.positions.size() * vocab);
}

void Demo::Serve(ringkv::model::DemoReport& r) {
  const int vocab = o_.model.vocab;
  const auto seed = static_cast<std::uint64_t>(o_.prompt_seed);
  const std::vector<int> system = PromptTokens(o_.system_prompt, vocab, seed + 2);
  std::vector<std::vector<int>> users;
  for (int c = 0; c < o_.conversations; ++c) {
    users.push_back(PromptTokens(o_.user_turn, vocab, seed + 3 + static_cast<std::uint64_t>(c)));
  }
  ringkv::model::ServingScene scene{system, users, o_.serve_decode, o_.check};
  r.serving = ringkv::model::RunServingScene(model_, scene, sampler_, ctx_);
}

ringkv::model::DemoReport Demo::Run() {
  ringkv::model::DemoReport r;
  r.config = o_.model;
  r.isa = std::string(ringkv::kernels::IsaName(ctx_.Tier()));
  r.logit_tolerance = ringkv::model::LogitTolerance(o_.model.kv_dtype, ctx_.Tier());
  r.threads = ctx_.Threads();
  const int vocab = o_.model.vocab;

  // Turn 1: prefill, decode, snapshot.
  ModelCaches caches(o_.model);
  const std::vector<int> prompt1 =
      PromptTokens(o_.prompt, vocab, static_cast<std::uint64_t>(o_.prompt_seed));
  Feed(caches, prompt1, r.turn1_prefill);
  Decode(caches, o_.decode, r.turn1_decode, "turn 1 decode");
  auto start = Clock::now();
  const std::unique_ptr<ringkv::LayerSnapshot> snapshot = caches.Snapshot(0);
  r.snapshot_seconds = Since(start);
  r.snapshot_bytes = snapshot->Size();
  r.snapshot_tokens = caches.Offset();
  const std::vector<int> prefix = t_.tokens;
  const std::vector<float> turn1_last = t_.last;

  // Turn 2: a new request sharing turn 1's prefix. Warm: restore the snapshot into
  // fresh caches, prefill only the new prompt. Cold: prefill everything.
  const std::vector<int> prompt2 =
      PromptTokens(o_.turn2_prompt, vocab, static_cast<std::uint64_t>(o_.prompt_seed) + 1);
  std::vector<int> full = prefix;
  full.insert(full.end(), prompt2.begin(), prompt2.end());
  {
    ModelCaches cold(o_.model);
    ForwardStats cold_stats;
    r.cold_logits = model_.Forward(full, cold.Layers(), ctx_, LogitRows::kLast, &cold_stats);
    r.cold_prefill_seconds = cold_stats.total_seconds;
    r.cold_tokens = static_cast<std::int64_t>(full.size());
  }
  ModelCaches warm(o_.model);
  caches.Free();  // turn 1's request is over; its state lives on in the snapshot
  start = Clock::now();
  if (!warm.Restore(snapshot.get(), r.snapshot_tokens)) {
    throw ringkv::Error("[ringkv_demo] restoring the turn-1 snapshot failed");
  }
  r.restore_seconds = Since(start);
  Feed(warm, prompt2, r.turn2_prefill);
  r.warm_vs_cold_diff = 0;
  for (std::size_t j = 0; j < t_.last.size(); ++j) {
    r.warm_vs_cold_diff =
        std::max(r.warm_vs_cold_diff, static_cast<double>(std::abs(t_.last[j] - r.cold_logits[j])));
  }
  Decode(warm, o_.turn2_decode, r.turn2_decode, "turn 2 decode");

  // A speculative step, then the long generation.
  Speculate(warm, r);
  r.sliding_bytes_min = r.sliding_bytes_max = warm.AllocatedBytes(LayerKind::kSliding);
  r.long_offset_start = warm.Offset();
  Decode(warm, o_.long_tokens, r.long_decode, "long generation", [&] {
    const std::size_t bytes = warm.AllocatedBytes(LayerKind::kSliding);
    r.sliding_bytes_min = std::min(r.sliding_bytes_min, bytes);
    r.sliding_bytes_max = std::max(r.sliding_bytes_max, bytes);
  });
  r.final_offset = warm.Offset();
  r.global_bytes = warm.AllocatedBytes(LayerKind::kGlobal);
  r.sliding_bytes = warm.AllocatedBytes(LayerKind::kSliding);
  if (o_.check) Check(r);
  if (o_.conversations > 0) Serve(r);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  namespace model = ringkv::model;
  // Everything about the configuration is checked before the run allocates anything.
  model::DemoOptions options;
  try {
    const model::DemoCommandLine command_line = model::ParseDemoCommandLine(
        std::span<const char* const>(argv, static_cast<std::size_t>(argc)));
    if (command_line.help) {
      std::fputs(model::DemoHelp().c_str(), stdout);
      return 0;
    }
    options = command_line.options;
    model::CheckDemoMemory(options, model::PhysicalMemoryBytes());
  } catch (const ringkv::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return model::kExitBadConfiguration;
  }
  try {
    Demo demo(options);
    const model::DemoReport report = demo.Run();
    const std::string out = options.json ? model::ToJson(report) : model::ToText(report);
    std::fputs(out.c_str(), stdout);
    return model::ExitCode(report);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "[ringkv_demo] out of memory (std::bad_alloc): try smaller sizes\n");
  } catch (const std::exception& e) {  // ringkv::Error included
    std::fprintf(stderr, "[ringkv_demo] the run failed: %s\n", e.what());
  }
  return model::kExitRunFailed;
}
