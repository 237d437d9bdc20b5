#include "serving_scene.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <gsl/narrow>

#include "batch_forward.h"
#include "recompute.h"
#include "ringkv/error.h"
#include "serving_caches.h"

namespace ringkv::model {
namespace {

// One conversation's tokens and the logit rows the batched run produced for its
// positions from `first_row` on (row p predicts token p + 1).
struct Conversation {
  std::vector<int> tokens;
  Position first_row = 0;
  std::vector<float> rows;  // [tokens.size() - first_row, vocab]

  std::span<const float> Last(std::size_t vocab) const {
    return std::span<const float>(rows).subspan(rows.size() - vocab);
  }
};

ServingCachesOptions PoolsFor(const ServingScene& scene) {
  constexpr std::int64_t kBlockTokens = 64;
  const auto n = gsl::narrow<std::int64_t>(scene.user_turns.size());
  const auto system = gsl::narrow<std::int64_t>(scene.system_prompt.size());
  const auto user = gsl::narrow<std::int64_t>(scene.user_turns.front().size());
  ServingCachesOptions o;
  o.max_sequences = gsl::narrow<int>(n);
  o.block_tokens = kBlockTokens;
  // Every token once, plus for each conversation the partly shared block it
  // copies on its first write and a partly filled last block.
  o.capacity_tokens = system + n * (user + scene.steps) + (2 * n + 1) * kBlockTokens;
  o.max_batch = std::max({system, n * user, n});
  return o;
}

}  // namespace

ServingReport RunServingScene(const TinyTransformer& model, const ServingScene& scene,
                              Sampler& sampler, Context& ctx) {
  if (scene.system_prompt.empty() || scene.user_turns.empty() || scene.steps < 1) {
    throw Error(fmt::format(
        "[RunServingScene] system prompt {} tokens, {} conversations, {} steps: none may be 0",
        scene.system_prompt.size(), scene.user_turns.size(), scene.steps));
  }
  const std::size_t user = scene.user_turns.front().size();
  for (std::size_t c = 0; c < scene.user_turns.size(); ++c) {
    if (scene.user_turns[c].size() != user || user == 0) {
      throw Error(fmt::format(
          "[RunServingScene] user turn {} has {} tokens, turn 0 {}: all must have the same, > 0", c,
          scene.user_turns[c].size(), user));
    }
  }
  const auto vocab = gsl::narrow<std::size_t>(model.Config().vocab);
  const auto n = scene.user_turns.size();
  const auto system = gsl::narrow<Position>(scene.system_prompt.size());
  ServingReport r;
  r.conversations = gsl::narrow<int>(n);
  r.system_tokens = system;
  r.user_tokens = gsl::narrow<int>(user);
  r.steps = scene.steps;
  r.pool_dtype = PoolDtype(model.Config().kv_dtype);
  ServingCaches caches(model.Config(), PoolsFor(scene));
  std::vector<Conversation> conv(n);

  // The system prompt once, into sequence 0; the others share its blocks.
  std::vector<Position> positions;
  std::vector<SequenceId> ids;
  for (Position p = 0; p < system; ++p) positions.push_back(p);
  ids.assign(positions.size(), 0);
  ForwardBatch(model, scene.system_prompt, Batch{positions, ids}, caches, ctx, LogitRows::kLast,
               &r.system_prefill);
  for (std::size_t c = 1; c < n; ++c) caches.CopyPrefix(0, gsl::narrow<SequenceId>(c), system);

  // Every user turn in one batch; each conversation's last row starts its decode.
  std::vector<int> tokens;
  positions.clear();
  ids.clear();
  for (std::size_t c = 0; c < n; ++c) {
    conv[c].tokens.assign(scene.system_prompt.begin(), scene.system_prompt.end());
    conv[c].tokens.insert(conv[c].tokens.end(), scene.user_turns[c].begin(),
                          scene.user_turns[c].end());
    conv[c].first_row = system + gsl::narrow<Position>(user) - 1;
    for (std::size_t i = 0; i < user; ++i) {
      tokens.push_back(scene.user_turns[c][i]);
      positions.push_back(system + gsl::narrow<Position>(i));
      ids.push_back(gsl::narrow<SequenceId>(c));
    }
  }
  std::vector<float> rows = ForwardBatch(model, tokens, Batch{positions, ids}, caches, ctx,
                                         LogitRows::kAll, &r.user_prefill);
  for (std::size_t c = 0; c < n; ++c) {
    const auto last = rows.begin() + gsl::narrow<std::ptrdiff_t>(((c + 1) * user - 1) * vocab);
    conv[c].rows.assign(last, last + gsl::narrow<std::ptrdiff_t>(vocab));
  }

  // Decode: one token per conversation per step, all in one batch.
  for (int step = 0; step < scene.steps; ++step) {
    tokens.clear();
    positions.clear();
    ids.clear();
    for (std::size_t c = 0; c < n; ++c) {
      tokens.push_back(sampler.Next(conv[c].Last(vocab)));
      positions.push_back(gsl::narrow<Position>(conv[c].tokens.size()));
      ids.push_back(gsl::narrow<SequenceId>(c));
    }
    rows =
        ForwardBatch(model, tokens, Batch{positions, ids}, caches, ctx, LogitRows::kAll, &r.decode);
    for (std::size_t c = 0; c < n; ++c) {
      conv[c].tokens.push_back(tokens[c]);
      const auto row = rows.begin() + gsl::narrow<std::ptrdiff_t>(c * vocab);
      conv[c].rows.insert(conv[c].rows.end(), row, row + gsl::narrow<std::ptrdiff_t>(vocab));
    }
  }
  r.used_bytes = caches.UsedBytes();
  r.separate_bytes = caches.SeparateBytes();

  if (!scene.check) return r;
  const auto start = std::chrono::steady_clock::now();
  for (const Conversation& c : conv) {
    const std::vector<float> reference = RecomputeLogits(model, c.tokens, ctx, r.pool_dtype);
    float worst = 0;
    const std::size_t count = c.rows.size() / vocab;
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t p = gsl::narrow<std::size_t>(c.first_row) + i;
      for (std::size_t j = 0; j < vocab; ++j) {
        const float d = std::abs(c.rows[i * vocab + j] - reference[p * vocab + j]);
        if (std::isnan(d) || d > worst) worst = d;  // a NaN stays: it must fail the check
      }
    }
    r.max_abs_diff.push_back(static_cast<double>(worst));
    r.positions += gsl::narrow<std::int64_t>(count);
  }
  r.recompute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace ringkv::model
