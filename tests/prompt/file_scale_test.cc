// Prompt cache files at scale: loading is linear in the node count, holds no
// more than the budget while it builds snapshots, and Save never writes a file
// that Load would refuse for its size.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "alloc_tracker.h"
#include "file_craft.h"
#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

using nlohmann::json;

constexpr std::size_t kLots = std::size_t{1} << 30;

// Turns a file of one one-token node into one of `count` such nodes, each with
// its own K/V tensors (copies of the original's bytes); `shape(node, i)` sets
// node i's place in the trie (parent, span, tokens).
std::vector<std::byte> ManyNodes(CraftedFile f, int count,
                                 const std::function<void(json& node, int i)>& shape) {
  const json node = f.nodes[0];
  const json keys = f.header["n0.l0.keys"], values = f.header["n0.l0.values"];
  const std::vector<std::byte> k_bytes(f.data.begin(), f.data.begin() + 8);
  const std::vector<std::byte> v_bytes(f.data.begin() + 8, f.data.begin() + 16);
  json header = json::object();
  header["__metadata__"] = f.header["__metadata__"];
  f.nodes = json::array();
  f.data.clear();
  for (int i = 0; i < count; ++i) {
    const std::string k = "n" + std::to_string(i) + ".l0.keys";
    const std::string v = "n" + std::to_string(i) + ".l0.values";
    const std::uint64_t at = f.data.size();
    json ke = keys, ve = values;
    ke["data_offsets"] = {at, at + 8};
    ve["data_offsets"] = {at + 8, at + 16};
    header[k] = ke;
    header[v] = ve;
    f.data.insert(f.data.end(), k_bytes.begin(), k_bytes.end());
    f.data.insert(f.data.end(), v_bytes.begin(), v_bytes.end());
    json n = node;
    shape(n, i);
    n["last_used"] = i;
    n["layers"][0]["keys"] = k;
    n["layers"][0]["values"] = v;
    f.nodes.push_back(std::move(n));
  }
  f.header = std::move(header);
  f.RecomputeTensorChecksums();
  return f.Bytes();
}

// 100,000 root nodes took 127 s to load: each node was compared with all its
// siblings. Linear loading takes well under a second here; a quadratic loader
// would need minutes (and ctest's timeout stops it).
TEST(PromptFileScale, HundredThousandRootNodesLoad) {
  ScratchDir dir;
  LayerCaches caches = LayerCaches::Interleaved(1, 1, 4, 4);  // one global layer
  PromptCache source(caches, Options(kLots));
  Serve(source, caches, {0});
  source.Save(dir.File("one.safetensors"));
  CraftedFile f = CraftedFile::Parse(ReadBytes(dir.File("one.safetensors")));
  ASSERT_EQ(f.nodes.size(), 1u);
  constexpr int kNodes = 100000;
  const std::vector<std::byte> file =
      ManyNodes(std::move(f), kNodes, [](json& n, int i) { n["tokens"] = {i}; });
  PromptCache loaded(caches, Options(kLots));
  ASSERT_NO_THROW(loaded.LoadFromMemory(file));
  EXPECT_EQ(loaded.Stats().nodes, static_cast<std::size_t>(kNodes));
  // The cap grows with the budget: this 30 MB header needs a budget of 512 MiB.
  EXPECT_GT(CraftedFile::LengthField(file), std::size_t{16} << 20);
  EXPECT_EQ(loaded.Lookup(std::vector<int>{kNodes - 1, 5}).reused, 1);
}

// A chain of 100,000 one-token nodes (what a decode loop committing every step
// builds): walking, listing, saving and destroying the trie must not recurse
// once per level (they overflowed the stack).
TEST(PromptFileScale, DeepChainOfNodes) {
  ScratchDir dir;
  LayerCaches caches = LayerCaches::Interleaved(1, 1, 4, 4);
  {
    PromptCache source(caches, Options(kLots));
    Serve(source, caches, {0});
    source.Save(dir.File("one.safetensors"));
  }
  constexpr int kDepth = 100000;
  const std::vector<std::byte> file = ManyNodes(
      CraftedFile::Parse(ReadBytes(dir.File("one.safetensors"))), kDepth, [](json& n, int i) {
        n["parent"] = i - 1;
        n["start"] = i;
        n["end"] = i + 1;
        n["tokens"] = {i % 3};
        n["layers"][0]["from"] = i;
        n["layers"][0]["to"] = i + 1;
      });
  {
    // A 48 MB header: the budget must be 16 times that.
    PromptCache loaded(caches, Options(std::size_t{2} << 30));
    ASSERT_NO_THROW(loaded.LoadFromMemory(file));
    EXPECT_EQ(loaded.Stats().nodes, static_cast<std::size_t>(kDepth));
    EXPECT_EQ(loaded.Nodes().size(), static_cast<std::size_t>(kDepth));
    ExpectBytes(loaded);
    std::vector<int> path;
    for (int i = 0; i < kDepth; ++i) path.push_back(i % 3);
    path.push_back(7);
    EXPECT_EQ(loaded.Lookup(path).reused, kDepth);
    loaded.SaveEntry(dir.File("deep.safetensors"), std::span<const int>(path).first(1000));
  }  // destroyed with the chain in it
}

// K/V of one layer, 256 + 256 f32 per token (2 KiB), distinct per token.
void Wide(LayerCaches& caches, std::span<const int> tokens) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> kv;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int d = 0; d < 256; ++d)
      kv.push_back(static_cast<float>(tokens[static_cast<std::size_t>(i)] + d));
  }
  const Tensor t = Tensor::FromVector(kv, {1, 1, n, 256});
  caches[0].Update(t, t);
}

// A file of 32 MiB of K/V loaded under a 2 MiB budget: the loader keeps the most
// recently used nodes that fit, and never holds much more than the budget (it
// used to read the whole file and build every snapshot before evicting).
TEST(PromptFileScale, LoadingHoldsAboutTheBudget) {
  ScratchDir dir;
  LayerCaches caches = LayerCaches::Interleaved(1, 1, 4, 256);
  PromptCache source(caches, Options(kLots));
  constexpr int kNodes = 32;
  constexpr int kTokens = 512;  // 1 MiB a node
  for (int i = 0; i < kNodes; ++i) {
    const std::vector<int> tokens = Seq(i * 1000, kTokens);
    const PrefixMatch m = source.Lookup(tokens);
    source.Prefill(tokens, m, [&](std::span<const int> chunk) { Wide(caches, chunk); });
    source.Commit(tokens);
  }
  const std::string path = dir.File("big.safetensors");
  source.Save(path);

  constexpr std::size_t kBudget = std::size_t{2} << 20;
  LayerCaches target_caches = LayerCaches::Interleaved(1, 1, 4, 256);
  PromptCache target(target_caches, Options(kBudget));
  const std::size_t live = ResetPeakAllocatedBytes();
  target.Load(path);
  const std::size_t peak = PeakAllocatedBytes() - live;
  // The budget, plus one node being read and imported (a 1 MiB tensor read, its
  // import) and the parsed header: 4 MiB of slack.
  EXPECT_LE(peak, kBudget + (std::size_t{4} << 20)) << "peak " << peak;
  EXPECT_LE(target.Stats().bytes, kBudget);
  // The two most recently used conversations fit.
  const std::vector<PromptNodeInfo> nodes = target.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  for (const PromptNodeInfo& n : nodes) EXPECT_GE(n.tokens.front(), (kNodes - 2) * 1000);
  RecordProperty("load_peak_bytes", std::to_string(peak));
}

// A node too large for the budget is dropped without its tensors ever being
// allocated: its checksums are verified in bounded chunks, its ring
// invariants from the header.
TEST(PromptFileScale, ANodeOverTheBudgetIsNeverAllocated) {
  ScratchDir dir;
  LayerCaches caches = LayerCaches::Interleaved(1, 1, 4, 256);
  PromptCache source(caches, Options(kLots));
  const std::vector<int> big = Seq(0, 8192);  // 16 MiB of K/V in one node
  const PrefixMatch m = source.Lookup(big);
  source.Prefill(big, m, [&](std::span<const int> chunk) { Wide(caches, chunk); });
  source.Commit(big);
  const std::string path = dir.File("big.safetensors");
  source.Save(path);
  LayerCaches target_caches = LayerCaches::Interleaved(1, 1, 4, 256);
  PromptCache target(target_caches, Options(std::size_t{1} << 20));
  const std::size_t live = ResetPeakAllocatedBytes();
  target.Load(path);
  const std::size_t peak = PeakAllocatedBytes() - live;
  EXPECT_LE(peak, std::size_t{2} << 20) << "peak " << peak;
  EXPECT_EQ(target.Nodes().size(), 0u);
  // A flipped byte in it is still found.
  std::vector<std::byte> file = ReadBytes(path);
  file[file.size() - 3] ^= std::byte{1};
  try {
    target.LoadFromMemory(file);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

// Save refuses a trie whose header would be over the loader's limit, so every
// file it writes loads back. 64 layers of tiny K/V make ~20 KB of header a node.
TEST(PromptFileScale, SaveRefusesAHeaderLoadWouldRefuse) {
  ScratchDir dir;
  LayerCaches caches = LayerCaches::Interleaved(64, 1, 4, 4);
  PromptCache pc(caches, Options(std::size_t{2} << 20));
  std::vector<int> tokens = {1};
  pc.Lookup(tokens);
  FakeForward(caches, tokens);
  pc.Commit(tokens);
  for (int i = 0; i < 1000; ++i) {
    tokens.push_back(i % 7);
    FakeForward(caches, std::span<const int>(tokens).last(1));
    pc.Commit(tokens);
  }
  ASSERT_EQ(pc.Stats().nodes, 1001u);
  try {
    pc.Save(dir.File("huge.safetensors"));
    FAIL() << "saved a header over the limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[PromptCache::Save] the header takes"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("huge.safetensors")));
  // A shorter entry saves and loads back.
  pc.SaveEntry(dir.File("entry.safetensors"), std::span<const int>(tokens).first(100));
  LayerCaches other = LayerCaches::Interleaved(64, 1, 4, 4);
  PromptCache loaded(other, Options(std::size_t{2} << 20));
  EXPECT_NO_THROW(loaded.Load(dir.File("entry.safetensors")));
  EXPECT_EQ(loaded.Stats().nodes, 100u);
}

}  // namespace
}  // namespace ringkv::test
