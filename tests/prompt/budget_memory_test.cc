// The byte budget bounds the memory the trie really holds. Snapshots share
// storage blocks copy-on-write with the live caches; after the caches write into
// a shared block, a snapshot covering one token of it pins a private copy of
// the whole block. One-token commits (a decode loop committing every step) used
// to keep a block per trie node: 1,024 nodes under a 4 MiB budget held ~1 GB.
// Here the growth of resident memory over such a workload must stay within the
// budget plus what the live caches hold plus a stated slack.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>

#include "alloc_tracker.h"
#include "prompt_test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RINGKV_TEST_SANITIZER_RSS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RINGKV_TEST_SANITIZER_RSS 1
#endif
#endif

namespace ringkv::test {
namespace {

// Resident memory of the process. Under AddressSanitizer freed memory sits in a
// quarantine (up to 256 MB) and stays resident, and ThreadSanitizer's shadow grows
// with every page touched, so under either the bytes live through operator new
// (alloc_tracker.h; K/V blocks are allocated so) stand in for it.
std::size_t ResidentBytes() {
#ifdef RINGKV_TEST_SANITIZER_RSS
  return LiveAllocatedBytes();
#else
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
#endif
}

constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kDim = 64;
// Per layer and token: 4 heads x (64 + 64) x 4 bytes = 2 KiB; a block of the
// default 256 tokens is 512 KiB.

void Decode(LayerCaches& caches, int token) {
  std::vector<float> kv(static_cast<std::size_t>(kHeads * kDim),
                        static_cast<float>(caches[0].Offset() * 1000 + token));
  const Tensor t = Tensor::FromVector(kv, {1, kHeads, 1, kDim});
  for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(t, t);
}

struct Workload {
  const char* name;
  std::vector<int> windows;  // per layer: 0 for a KVCache, else a RotatingKVCache's window
  std::size_t min_nodes;     // what the budget must still hold (small snapshots stay small)
};

void PrintTo(const Workload& w, std::ostream* os) { *os << w.name; }

class PromptBudget : public ::testing::TestWithParam<Workload> {};

TEST_P(PromptBudget, OneTokenCommitsStayWithinTheBudget) {
  constexpr std::size_t kBudget = std::size_t{4} << 20;
  constexpr int kSteps = 400;
  // Default blocks of 256 tokens.
  std::vector<LayerCaches::Layer> layers;
  for (int window : GetParam().windows) {
    if (window == 0) {
      layers.emplace_back(std::in_place_type<KVCache>);
    } else {
      layers.emplace_back(std::in_place_type<RotatingKVCache>, window);
    }
  }
  LayerCaches caches(std::move(layers));
  PromptCacheOptions options;
  options.byte_budget = kBudget;
  options.fingerprint = "budget";
  const std::size_t before = ResidentBytes();
  {
    PromptCache pc(caches, options);
    std::vector<int> tokens = {1};
    const PrefixMatch m = pc.Lookup(tokens);
    ASSERT_EQ(m.reused, 0);
    Decode(caches, 1);
    pc.Commit(tokens);
    for (int step = 0; step < kSteps; ++step) {
      const int token = 2 + step % 50;
      Decode(caches, token);
      tokens.push_back(token);
      pc.Commit(tokens);  // one more one-token node on the active path
      ASSERT_LE(pc.Stats().bytes, kBudget);
      ASSERT_EQ(pc.Stats().bytes, pc.SnapshotBytes());
    }
    std::size_t live = 0;
    for (std::size_t l = 0; l < caches.Size(); ++l) {
      if (auto* ring = dynamic_cast<RotatingKVCache*>(&caches[l])) {
        live += ring->AllocatedBytes();
      } else {
        live += dynamic_cast<KVCache&>(caches[l]).AllocatedBytes();
      }
    }
    const std::size_t after = ResidentBytes();
    const std::size_t growth = after > before ? after - before : 0;
    // Slack: allocator bookkeeping and arenas, the trie's nodes and token
    // vectors, one block per layer being copied: 8 MiB.
    constexpr std::size_t kSlack = std::size_t{8} << 20;
    EXPECT_LE(growth, kBudget + live + kSlack)
        << "resident memory grew by " << growth << " bytes; budget " << kBudget << ", live caches "
        << live << ", nodes " << pc.Stats().nodes;
    EXPECT_GE(pc.Stats().nodes, GetParam().min_nodes);
    RecordProperty("resident_growth_bytes", std::to_string(growth));
    // A ring restored from a kept (right-sized) window keeps the block size it
    // was built with: the restore copies into it rather than adopting blocks of
    // the few slots the window held, so the ring never grows in tiny blocks.
    std::vector<int> again(tokens.begin(), tokens.begin() + 20);
    again.push_back(99);
    ASSERT_GT(pc.Lookup(again).reused, 0);
    for (std::size_t l = 0; l < caches.Size(); ++l) {
      if (auto* ring = dynamic_cast<RotatingKVCache*>(&caches[l])) {
        EXPECT_EQ(ring->BlockTokens(), KVCache::kDefaultBlockTokens);
      }
    }
    RecordProperty("nodes", std::to_string(pc.Stats().nodes));
  }
}

// Per token and KVCache layer 2 KiB: two global layers hold 4 KiB a node, so
// every one of the 401 nodes fits in 4 MiB. A window of 64 (smaller than a
// block) is kept in a block of 64 slots (128 KiB): about 30 nodes fit.
// Before right-sizing, every node pinned a 512 KiB block per layer: the growth
// was ~98 MB for the mixed stack.
INSTANTIATE_TEST_SUITE_P(Stacks, PromptBudget,
                         ::testing::Values(Workload{"global", {0, 0}, 401},
                                           Workload{"mixed", {0, 64, 0}, 25}),
                         [](const ::testing::TestParamInfo<Workload>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace ringkv::test
