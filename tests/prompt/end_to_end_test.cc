// End to end on the tiny transformer (tools/model): logits computed after a
// prompt-cache hit equal logits computed from scratch (the no-cache recompute),
// for global, sliding-window and mixed layer patterns, with prompts longer than
// the window, for one multi-turn conversation and for several conversations
// sharing a pinned system prompt, under a generous and a tight byte budget, and
// after a save and load into fresh caches.
//
// Tolerance: as in tests/model/cached_vs_recompute_test.cc (f16 K/V: measured
// <= 9e-5 on logits of standard deviation ~2; a window off by one token moves
// logits by > 0.05).
#include <gtest/gtest.h>

#include <filesystem>

#include "model_test_util.h"
#include "recompute.h"
#include "ringkv/context.h"
#include "ringkv/prompt_cache.h"
#include "sampling.h"
#include "scratch_dir.h"
#include "tiny_transformer.h"

namespace ringkv::model::test {
namespace {

constexpr float kTolerance = 1e-3f;

int Every(const ModelConfig& c) { return c.global_every == 0 ? c.layers + 1 : c.global_every; }

PromptCacheOptions OptionsFor(const ModelConfig& c, std::size_t budget) {
  PromptCacheOptions o;
  o.byte_budget = budget;
  o.fingerprint = "tiny seed " + std::to_string(c.seed);
  return o;
}

class Server {
 public:
  Server(const TinyTransformer& model, Context& ctx, std::size_t budget)
      : model_(model),
        ctx_(ctx),
        caches_(LayerCaches::Interleaved(model.Config().layers, Every(model.Config()),
                                         model.Config().window, 4, model.Config().kv_dtype)),
        layers_(caches_.Caches()),
        cache_(caches_, OptionsFor(model.Config(), budget)) {}

  // Serves one request: lookup, prefill, `decode` greedy tokens (the last one
  // sampled but not fed, as a chat turn ends), commit. Returns the tokens
  // reused; checks every logit row produced against the recompute.
  int Turn(std::vector<int>& history, const std::vector<int>& user, int decode) {
    std::vector<int> fed = history;
    fed.insert(fed.end(), user.begin(), user.end());
    const PrefixMatch match = cache_.Lookup(fed);
    std::vector<std::vector<float>> rows(1);
    cache_.Prefill(fed, match, [&](std::span<const int> chunk) {
      rows[0] = model_.Forward(chunk, layers_, ctx_, LogitRows::kLast);
    });
    const std::size_t prompt = fed.size();
    for (int i = 0; i < decode; ++i) {
      const int next = Greedy(rows.back());
      history = fed;
      history.push_back(next);
      if (i + 1 == decode) break;
      fed.push_back(next);
      rows.push_back(model_.Forward(std::span<const int>(&next, 1), layers_, ctx_));
    }
    cache_.Commit(fed);
    const std::vector<float> reference = RecomputeLogits(model_, fed, ctx_);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const float diff = MaxRowDiff(rows[r], 0, reference, prompt - 1 + r, model_.Config().vocab);
      EXPECT_LE(diff, kTolerance) << "row " << r << " after reusing " << match.reused;
    }
    const PromptCacheStats stats = cache_.Stats();
    EXPECT_LE(stats.bytes, cache_.Options().byte_budget);
    EXPECT_EQ(stats.bytes, cache_.SnapshotBytes());
    return match.reused;
  }

  PromptCache& Cache() { return cache_; }

 private:
  const TinyTransformer& model_;
  Context& ctx_;
  LayerCaches caches_;
  std::vector<AttentionCache*> layers_;
  PromptCache cache_;
};

struct Pattern {
  const char* name;
  int global_every;
};

class PromptCacheEndToEnd : public ::testing::TestWithParam<Pattern> {
 protected:
  ModelConfig Config() const { return TinyConfig(GetParam().global_every); }  // window 8
  Context ctx_{1};
};

TEST_P(PromptCacheEndToEnd, MultiTurnConversationReusesEveryTurn) {
  const TinyTransformer model(Config(), ctx_);
  Server server(model, ctx_, std::size_t{1} << 30);
  std::vector<int> history;
  int committed = 0;  // tokens the caches held at the previous commit
  for (int turn = 0; turn < 4; ++turn) {
    const std::vector<int> user = RandomTokens(turn == 0 ? 13 : 5, model.Config().vocab,
                                               static_cast<std::uint32_t>(10 + turn));
    const int reused = server.Turn(history, user, 6);
    // The next request extends what was committed: all of it is reused.
    EXPECT_EQ(reused, committed) << GetParam().name << " turn " << turn;
    committed = static_cast<int>(history.size()) - 1;
  }
  EXPECT_GT(committed, 2 * model.Config().window);
  EXPECT_EQ(server.Cache().Stats().hits, 3);
}

void Conversations(const TinyTransformer& model, Context& ctx, std::size_t budget,
                   bool expect_full_reuse, PromptCache** keep = nullptr,
                   std::unique_ptr<Server>* out = nullptr) {
  auto server = std::make_unique<Server>(model, ctx, budget);
  const int vocab = model.Config().vocab;
  const std::vector<int> system = RandomTokens(12, vocab, 99);  // longer than the window
  std::vector<int> history;
  server->Turn(history, system, 1);  // the system prompt alone: cached, then pinned
  server->Cache().Pin(system);
  std::vector<std::vector<int>> histories(3, system);
  std::vector<int> committed(3, static_cast<int>(system.size()));
  for (int turn = 0; turn < 3; ++turn) {
    for (std::size_t c = 0; c < histories.size(); ++c) {
      const std::vector<int> user = RandomTokens(
          4, vocab, static_cast<std::uint32_t>(100 * turn) + static_cast<std::uint32_t>(c));
      const int reused = server->Turn(histories[c], user, 4);
      EXPECT_GE(reused, static_cast<int>(system.size())) << "conversation " << c;
      if (expect_full_reuse) {
        EXPECT_EQ(reused, committed[c]) << "conversation " << c;
      }
      committed[c] = static_cast<int>(histories[c].size()) - 1;
    }
  }
  if (keep != nullptr) *keep = &server->Cache();
  if (out != nullptr) *out = std::move(server);
}

TEST_P(PromptCacheEndToEnd, ConversationsSharingASystemPrompt) {
  const TinyTransformer model(Config(), ctx_);
  Conversations(model, ctx_, std::size_t{1} << 30, true);
}

TEST_P(PromptCacheEndToEnd, UnderATightBudget) {
  const TinyTransformer model(Config(), ctx_);
  // Measure the working set, then serve it again with 40% of it.
  std::unique_ptr<Server> roomy;
  Conversations(model, ctx_, std::size_t{1} << 30, true, nullptr, &roomy);
  const std::size_t working_set = roomy->Cache().Stats().bytes;
  std::unique_ptr<Server> tight;
  Conversations(model, ctx_, working_set * 4 / 10, false, nullptr, &tight);
  EXPECT_GT(tight->Cache().Stats().evictions, 0);
  EXPECT_LE(tight->Cache().Stats().bytes, working_set * 4 / 10);
}

TEST_P(PromptCacheEndToEnd, AfterSavingAndLoadingIntoFreshCaches) {
  const TinyTransformer model(Config(), ctx_);
  std::unique_ptr<Server> first;
  Conversations(model, ctx_, std::size_t{1} << 30, true, nullptr, &first);
  const ringkv::test::ScratchDir dir;
  const std::string path = dir.File("cache.safetensors");
  first->Cache().Save(path);
  Server second(model, ctx_, std::size_t{1} << 30);
  second.Cache().Load(path);
  // Continue conversation 0 of the first server in another process's caches:
  // rebuild its history from the trie's deepest path that starts with it.
  std::vector<int> history;
  const std::vector<PromptNodeInfo> nodes = second.Cache().Nodes();
  ASSERT_FALSE(nodes.empty());
  // Follow first children down from the root: the system prompt and a conversation.
  int at = 0;
  for (;;) {
    history.insert(history.end(), nodes[static_cast<std::size_t>(at)].tokens.begin(),
                   nodes[static_cast<std::size_t>(at)].tokens.end());
    int child = -1;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].parent == at) child = child < 0 ? static_cast<int>(i) : child;
    }
    if (child < 0) break;
    at = child;
  }
  const int cached = static_cast<int>(history.size());
  history.push_back(3);  // the token sampled last, never fed
  const int reused = second.Turn(history, RandomTokens(3, model.Config().vocab, 7), 3);
  EXPECT_EQ(reused, cached);
}

INSTANTIATE_TEST_SUITE_P(Patterns, PromptCacheEndToEnd,
                         ::testing::Values(Pattern{"global", 1}, Pattern{"sliding", 0},
                                           Pattern{"mixed", 2}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace ringkv::model::test
