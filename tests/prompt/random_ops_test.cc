// Random operations on a small trie under a tight budget: after every call the
// incrementally kept byte count (blocks held, each once) equals a recount, stays
// within the budget, and every Lookup leaves the caches holding exactly the
// prefix it reports.
#include <gtest/gtest.h>

#include <random>

#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

TEST(PromptRandom, AccountingStaysExact) {
  ScratchDir dir;
  // A sliding layer (window 4) and a global one, blocks of 4 tokens: spans and
  // windows both cross block boundaries and get right-sized.
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 4);
  const std::size_t budget = 160 * kTokenBytes;
  PromptCache pc(caches, Options(budget));
  std::mt19937 rng(12345);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  std::vector<std::vector<int>> served;
  for (int op = 0; op < 3000; ++op) {
    const int kind = pick(10);
    if (kind < 6 || served.empty()) {
      // A request sharing a prefix with an earlier one (or not), then decoding.
      std::vector<int> tokens;
      if (!served.empty() && pick(4) > 0) {
        const std::vector<int>& base =
            served[static_cast<std::size_t>(pick(static_cast<int>(served.size())))];
        tokens.assign(base.begin(), base.begin() + 1 + pick(static_cast<int>(base.size())));
      }
      const int extra = 1 + pick(9);
      for (int i = 0; i < extra; ++i) tokens.push_back(pick(5));
      const PrefixMatch m = pc.Lookup(tokens);
      ExpectHolds(caches, std::span<const int>(tokens).first(static_cast<std::size_t>(m.reused)));
      ExpectBytes(pc);
      pc.Prefill(tokens, m, [&](std::span<const int> chunk) { FakeForward(caches, chunk); });
      pc.Commit(tokens);
      const int decode = pick(4);
      for (int i = 0; i < decode; ++i) {
        tokens.push_back(pick(5));
        FakeDecode(caches, std::span<const int>(tokens).last(1));
        if (pick(2) == 0) pc.Commit(tokens);
      }
      if (decode > 0) pc.Commit(tokens);
      served.push_back(tokens);
      if (served.size() > 40) served.erase(served.begin());
    } else if (kind == 6) {
      const auto& t = served[static_cast<std::size_t>(pick(static_cast<int>(served.size())))];
      try {
        pc.Pin(std::span<const int>(t).first(
            1 + static_cast<std::size_t>(pick(static_cast<int>(t.size())))));
      } catch (const Error&) {
        // Not cached any more, or over the budget: refused.
      }
    } else if (kind == 7) {
      const auto& t = served[static_cast<std::size_t>(pick(static_cast<int>(served.size())))];
      pc.Unpin(t);
    } else if (kind == 8) {
      pc.Save(dir.File("cache.safetensors"));
      pc.Load(dir.File("cache.safetensors"));
    } else if (pick(20) == 0) {
      pc.Clear();
    } else {
      FakeForward(caches, std::vector<int>{pick(5)});
      pc.Checkpoint();
    }
    ExpectBytes(pc);
    if (HasFailure()) {
      ADD_FAILURE() << "at operation " << op;
      return;
    }
  }
  EXPECT_GT(pc.Stats().evictions, 100);
  EXPECT_GT(pc.Stats().merges, 0);
  EXPECT_GT(pc.Stats().splits, 100);
}

}  // namespace
}  // namespace ringkv::test
