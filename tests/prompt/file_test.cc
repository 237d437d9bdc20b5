// Persistence: a round trip is bit-exact, and every corruption class (truncation
// at each section, any flipped header byte, flipped tensor bytes, another model)
// is rejected with an Error naming the problem and the prompt cache unchanged.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "file_craft.h"
#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

constexpr std::size_t kLots = std::size_t{1} << 30;

LayerCaches Mixed() { return LayerCaches::Interleaved(3, 2, 4, 4); }

std::uint64_t HeaderLength(const std::vector<std::byte>& file) {
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b)
    n = (n << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(b)]);
  return n;
}

class PromptFile : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small trie: a pinned system prompt, two conversations, a repeat.
    const std::vector<int> system = Seq(100, 6);
    Serve(source_, source_caches_, system);
    source_.Pin(system);
    Serve(source_, source_caches_, Cat(system, Seq(200, 5)));
    Serve(source_, source_caches_, Cat(system, Seq(300, 7)));
    Serve(source_, source_caches_, Cat(system, Seq(300, 7)));
    path_ = (dir_ / "cache.safetensors").string();
    source_.Save(path_);
    file_ = ReadBytes(path_);
  }
  ScratchDir scratch_;  // unique per test and run (mkdtemp)
  std::filesystem::path dir_ = scratch_.Path();
  LayerCaches source_caches_ = Mixed();
  PromptCache source_{source_caches_, Options(kLots)};
  std::string path_;
  std::vector<std::byte> file_;
};

void ExpectSameTrie(const std::vector<PromptNodeInfo>& a, const std::vector<PromptNodeInfo>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].parent, b[i].parent) << i;
    EXPECT_EQ(a[i].start, b[i].start) << i;
    EXPECT_EQ(a[i].end, b[i].end) << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_EQ(a[i].bytes, b[i].bytes) << i;
    EXPECT_EQ(a[i].pinned, b[i].pinned) << i;
    EXPECT_EQ(a[i].missing_windows, b[i].missing_windows) << i;
  }
}

TEST_F(PromptFile, RoundTripIsBitExact) {
  LayerCaches caches = Mixed();
  PromptCache loaded(caches, Options(kLots));
  loaded.Load(path_);
  ExpectSameTrie(loaded.Nodes(), source_.Nodes());  // node bytes included
  // The held blocks may differ: the source's split halves share a boundary
  // block, the loaded ones each have their own.
  ExpectBytes(loaded);
  // Saving what was loaded gives the same bytes.
  const std::string again = (dir_ / "again.safetensors").string();
  loaded.Save(again);
  EXPECT_EQ(ReadBytes(again), file_);
  // And the loaded snapshots restore the same K/V, sliding windows included.
  const std::vector<int> turn = Cat(Cat(Seq(100, 6), Seq(300, 7)), {5});
  EXPECT_EQ(loaded.Lookup(turn).reused, 13);
  ExpectHolds(caches, std::span<const int>(turn).first(13));
  EXPECT_EQ(loaded.Lookup(Cat(Seq(100, 6), {1})).reused, 6);
  ExpectHolds(caches, Seq(100, 6));
}

TEST_F(PromptFile, SavesOneEntry) {
  const std::string entry = (dir_ / "entry.safetensors").string();
  source_.SaveEntry(entry, Cat(Seq(100, 6), Seq(200, 5)));
  LayerCaches caches = Mixed();
  PromptCache loaded(caches, Options(kLots));
  loaded.Load(entry);
  const std::vector<PromptNodeInfo> nodes = loaded.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].tokens, Seq(100, 6));
  EXPECT_TRUE(nodes[0].pinned);
  EXPECT_EQ(nodes[1].tokens, Seq(200, 5));
  EXPECT_EQ(loaded.Lookup(Cat(Cat(Seq(100, 6), Seq(200, 5)), {1})).reused, 11);
  EXPECT_THROW(source_.SaveEntry(entry, Seq(900, 3)), Error);
}

TEST_F(PromptFile, SaveReplacesAtomically) {
  // Overwrite with a different trie: the file is either the old or the new one,
  // and no temporary file is left behind.
  LayerCaches caches = Mixed();
  PromptCache other(caches, Options(kLots));
  Serve(other, caches, Seq(7, 5));
  other.Save(path_);
  EXPECT_NE(ReadBytes(path_), file_);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
  try {
    other.Save((dir_ / "missing" / "x.safetensors").string());
    FAIL() << "saving into a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[PromptCache::Save]"), std::string::npos) << e.what();
  }
}

// The state of a prompt cache that must survive a failed load unchanged.
struct Observed {
  std::vector<PromptNodeInfo> nodes;
  std::size_t bytes = 0;
  std::vector<int> offsets;
};

class Rejects : public PromptFile {
 protected:
  void SetUp() override {
    PromptFile::SetUp();
    Serve(target_, target_caches_, Seq(40, 9));
    before_ = Observe();
  }
  Observed Observe() const {
    return {target_.Nodes(), target_.SnapshotBytes(), target_caches_.Offsets()};
  }
  // Loads `file`: must throw SnapshotError mentioning `needle` and change nothing.
  void ExpectRejected(const std::vector<std::byte>& file, const std::string& needle,
                      const std::string& label) {
    try {
      target_.LoadFromMemory(file);
      ADD_FAILURE() << label << ": loaded";
    } catch (const SnapshotError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("[PromptCache::Load] ", 0), 0u) << label << ": " << what;
      EXPECT_NE(what.find(needle), std::string::npos) << label << ": " << what;
    }
    const Observed after = Observe();
    ExpectSameTrie(after.nodes, before_.nodes);
    EXPECT_EQ(after.bytes, before_.bytes) << label;
    EXPECT_EQ(target_.Stats().bytes, before_.bytes) << label;
    EXPECT_EQ(after.offsets, before_.offsets) << label;
  }

  LayerCaches target_caches_ = Mixed();
  PromptCache target_{target_caches_, Options(kLots)};
  Observed before_;
};

TEST_F(Rejects, TruncationAtEverySection) {
  const std::size_t header_end = 8 + HeaderLength(file_);
  ASSERT_LT(header_end, file_.size());
  const std::vector<std::pair<std::size_t, const char*>> cuts = {
      {0, "fewer than the 8-byte"},
      {5, "fewer than the 8-byte"},
      {8, "exceeds"},
      {8 + 10, "exceeds"},
      {header_end - 1, "exceeds"},
      {header_end, "data section"},
      {header_end + 1, "data section"},
      {(header_end + file_.size()) / 2, "data section"},
      {file_.size() - 1, "data section"}};
  for (const auto& [size, needle] : cuts) {
    const std::vector<std::byte> cut(file_.begin(),
                                     file_.begin() + static_cast<std::ptrdiff_t>(size));
    ExpectRejected(cut, needle, "truncated to " + std::to_string(size));
  }
  std::vector<std::byte> longer = file_;
  longer.push_back(std::byte{0});
  ExpectRejected(longer, "data section", "one byte appended");
}

TEST_F(Rejects, EveryFlippedHeaderByte) {
  // One entry (a node with a window and two KV spans) keeps the header short
  // enough to flip every byte of it under the sanitizers.
  const std::string entry = (dir_ / "entry.safetensors").string();
  source_.SaveEntry(entry, Seq(100, 6));
  const std::vector<std::byte> file = ReadBytes(entry);
  const std::size_t header_end = 8 + HeaderLength(file);
  for (std::size_t i = 0; i < header_end; ++i) {
    std::vector<std::byte> bad = file;
    bad[i] ^= std::byte{0x01};
    ExpectRejected(bad, "", "header byte " + std::to_string(i));
    if (HasFailure()) return;
  }
}

TEST_F(Rejects, FlippedTensorBytes) {
  const std::size_t header_end = 8 + HeaderLength(file_);
  for (std::size_t i = header_end; i < file_.size(); i += 29) {
    std::vector<std::byte> bad = file_;
    bad[i] ^= std::byte{0x80};
    ExpectRejected(bad, "checksum", "data byte " + std::to_string(i));
    if (HasFailure()) return;
  }
}

TEST_F(Rejects, AnotherModel) {
  {
    LayerCaches caches = Mixed();
    PromptCache other(caches, Options(kLots, "another-model"));
    EXPECT_THROW(other.Load(path_), SnapshotError);
  }
  PromptCache wrong_fingerprint(target_caches_, Options(kLots, "another-model"));
  try {
    wrong_fingerprint.LoadFromMemory(file_);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("fingerprint \"test-model\" does not match the model's "
                                         "\"another-model\""),
              std::string::npos)
        << e.what();
  }
  // Caches holding K/V of two heads (the file has one).
  LayerCaches caches = Mixed();
  const Tensor two_heads = Tensor::Zeros(DType::kF32, {1, 2, 3, kDim});
  for (std::size_t l = 0; l < caches.Size(); ++l) caches[l].Update(two_heads, two_heads);
  PromptCache wrong_heads(caches, Options(kLots));
  try {
    wrong_heads.LoadFromMemory(file_);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 holds K/V f32 x 1 heads, key dim 2, value dim 2 "
                                         "in the file, f32 x 2 heads"),
              std::string::npos)
        << e.what();
  }
  LayerCaches wider = LayerCaches::Interleaved(3, 2, 5, 4);  // window 5
  PromptCache wrong_window(wider, Options(kLots));
  try {
    wrong_window.LoadFromMemory(file_);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding (window 4) in the file, sliding (window 5)"),
              std::string::npos)
        << e.what();
  }
  LayerCaches fewer = LayerCaches::Interleaved(2, 2, 4, 4);
  PromptCache wrong_layers(fewer, Options(kLots));
  EXPECT_THROW(wrong_layers.LoadFromMemory(file_), SnapshotError);
  // None of these loads touched the target.
  ExpectRejected(std::vector<std::byte>{}, "fewer than", "empty");
}

TEST_F(Rejects, MissingFileAndPinnedOverBudget) {
  EXPECT_THROW(target_.Load((dir_ / "nope").string()), SnapshotError);
  LayerCaches caches = Mixed();
  PromptCache tiny(caches, Options(8));
  EXPECT_THROW(tiny.Load(path_), SnapshotError);  // the pinned system prompt does not fit
  EXPECT_EQ(tiny.Nodes().size(), 0u);
}

}  // namespace
}  // namespace ringkv::test
