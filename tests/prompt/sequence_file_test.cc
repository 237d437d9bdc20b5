// SaveSequence / LoadSequence: one sequence of a pool to a file and back into
// any sequence id of a compatible pool, by copy (nothing shared with the file);
// every corruption, truncation, foreign format and layout mismatch refused.
#include "ringkv/sequence_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache_file_test_util.h"
#include "ringkv/prompt_cache.h"
#include "sequence_test_util.h"

namespace ringkv::test {
namespace {

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int> Prompt(int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(i * 37 % 101 - 3);
  return out;
}

class SequenceFile : public ::testing::Test {
 protected:
  static constexpr Position kWindow = 8;
  SequenceFile()
      : sliding_(SeqOptions(2, 64 * 4, 4, 8, kWindow)), global_(SeqOptions(1, 64 * 4, 4, 8)) {}

  // Sequence `seq` fed `n` tokens in passes of 5 (the sliding cache releases as it goes).
  void FeedBoth(SequenceId seq, const std::vector<int>& tokens, Position from = 0) {
    for (Position p = from; p < static_cast<Position>(tokens.size()); p += 5) {
      const Position to = std::min<Position>(p + 5, static_cast<Position>(tokens.size()));
      Feed(sliding_, seq, tokens, p, to);
      Feed(global_, seq, tokens, p, to);
    }
  }

  std::vector<std::byte> Saved(SequenceId seq, const std::vector<int>& tokens) {
    const CausalCache* caches[] = {&sliding_, &global_};
    SaveSequence(dir_.File("seq.safetensors"), caches, seq, tokens, {{"model", "m1"}});
    return ReadBytes(dir_.File("seq.safetensors"));
  }

  std::string Refusal(const std::vector<std::byte>& file, SequenceId dst) {
    CausalCache* caches[] = {&sliding_, &global_};
    return SequenceLoadRefusal(file, caches, dst);
  }

  CausalCache sliding_;
  CausalCache global_;
  ScratchDir dir_;
};

TEST_F(SequenceFile, RoundTripIntoAnotherSequenceAndAnotherPool) {
  const std::vector<int> tokens = Prompt(30);
  FeedBoth(2, tokens);
  ASSERT_GT(sliding_.SequencePositions(2).front(), 0) << "the window slid";
  Saved(2, tokens);
  const std::vector<Position> saved_positions = sliding_.SequencePositions(2);
  const std::int64_t used_global = global_.UsedBlocks();
  CausalCache* caches[] = {&sliding_, &global_};
  const SavedSequence loaded = LoadSequence(dir_.File("seq.safetensors"), caches, 6);
  EXPECT_EQ(loaded.tokens, tokens);
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"model", "m1"}}));
  EXPECT_EQ(loaded.next_position, 30);
  EXPECT_EQ(sliding_.SequencePositions(6), saved_positions);
  ExpectHolds(sliding_, 6, tokens);
  ExpectHolds(global_, 6, tokens);
  EXPECT_TRUE(sliding_.CanResume(6, 30));
  // Nothing shared: the copy took blocks of its own (4 tokens a block).
  EXPECT_EQ(global_.UsedBlocks(), used_global + 8);
  for (const CausalCache* cache : {&sliding_, &global_}) {
    std::set<const void*> saved_blocks;
    detail::ForEachSequenceBlock(*cache->SnapshotSequence(2),
                                 [&](const void* id, std::size_t) { saved_blocks.insert(id); });
    detail::ForEachSequenceBlock(*cache->SnapshotSequence(6), [&](const void* id, std::size_t) {
      EXPECT_FALSE(saved_blocks.contains(id));
    });
  }
  // Sequence 6 decodes on exactly as 2 would.
  const std::vector<int> longer = Concat(tokens, {5, 6, 7});
  FeedBoth(6, longer, 30);
  ExpectHolds(sliding_, 6, longer);
  ExpectHolds(global_, 6, longer);
  // Into another pool of the same layout (other block size) over a sequence it held.
  CausalCacheOptions s = SeqOptions(2, 64 * 5, 5, 2, kWindow);
  CausalCacheOptions g = SeqOptions(1, 64 * 5, 5, 2);
  CausalCache other_sliding(s);
  CausalCache other_global(g);
  Feed(other_global, 1, Prompt(3), 0, 3);
  Feed(other_sliding, 1, Prompt(3), 0, 3);
  CausalCache* other[] = {&other_sliding, &other_global};
  LoadSequence(dir_.File("seq.safetensors"), other, 1);
  ExpectHolds(other_sliding, 1, tokens);
  ExpectHolds(other_global, 1, tokens);
}

TEST_F(SequenceFile, LayoutMismatchIsRefusedWithNothingChanged) {
  const std::vector<int> tokens = Prompt(12);
  FeedBoth(2, tokens);
  const std::vector<std::byte> file = Saved(2, tokens);
  auto refused = [&](CausalCacheOptions s, CausalCacheOptions g) {
    CausalCache a(s);
    CausalCache b(g);
    CausalCache* caches[] = {&a, &b};
    std::string what;
    try {
      (void)LoadSequenceFromMemory(file, caches, 0);
    } catch (const SnapshotError& e) {
      what = e.what();
    }
    EXPECT_EQ(a.UsedBlocks() + b.UsedBlocks(), 0);
    EXPECT_TRUE(a.Sequences().empty() && b.Sequences().empty());
    return what;
  };
  CausalCacheOptions s = SeqOptions(2, 64, 4, 2, kWindow);
  CausalCacheOptions g = SeqOptions(1, 64, 4, 2);
  CausalCacheOptions heads = g;
  heads.kv_heads = 4;
  EXPECT_NE(refused(s, heads).find("[LoadSequence] caches[1].kv_heads is 2 in the file, 4 in"),
            std::string::npos);
  CausalCacheOptions layers = s;
  layers.layers = 3;
  EXPECT_NE(refused(layers, g).find("caches[0].layers is 2 in the file, 3 in the pool"),
            std::string::npos);
  CausalCacheOptions window = s;
  window.window = 16;
  EXPECT_NE(refused(window, g).find("caches[0].window is 8 in the file, 16"), std::string::npos);
  CausalCacheOptions dtype = g;
  dtype.dtype = DType::kF16;
  EXPECT_NE(refused(s, dtype).find("caches[1].dtype is f32 in the file, f16 in the pool"),
            std::string::npos);
  EXPECT_NE(refused(g, s).find("caches[0].layers is 2 in the file, 1"), std::string::npos);
  CausalCache only(g);
  CausalCache* one[] = {&only};
  EXPECT_THROW((void)LoadSequenceFromMemory(file, one, 0), SnapshotError);
}

// A pool that cannot hold the sequence: "cache full", and every cache exactly
// as it was (the first one had room and is rolled back).
TEST_F(SequenceFile, FullPoolRollsBackEveryCache) {
  const std::vector<int> tokens = Prompt(30);
  FeedBoth(2, tokens);
  const std::vector<std::byte> file = Saved(2, tokens);
  CausalCache roomy(SeqOptions(2, 64 * 4, 4, 4, kWindow));
  CausalCache tight(SeqOptions(1, 8 * 4, 4, 4));
  Feed(tight, 0, Prompt(20), 0, 20);  // 5 of its 8 blocks
  Feed(roomy, 1, Prompt(6), 0, 6);
  Feed(tight, 1, Prompt(6), 0, 6);  // 2 more: 1 left, 30 tokens need 8
  CausalCache* caches[] = {&roomy, &tight};
  const std::int64_t roomy_used = roomy.UsedBlocks();
  const std::int64_t tight_used = tight.UsedBlocks();
  std::string what;
  try {
    (void)LoadSequenceFromMemory(file, caches, 1);
  } catch (const SnapshotError&) {
    ADD_FAILURE() << "a valid file";
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("[LoadSequence] caches[1] cannot take the 30 saved tokens into seq 1: ", 0),
            0u)
      << what;
  EXPECT_NE(what.find("cache full"), std::string::npos) << what;
  EXPECT_EQ(roomy.UsedBlocks(), roomy_used);
  EXPECT_EQ(tight.UsedBlocks(), tight_used);
  ExpectHolds(roomy, 1, Prompt(6));
  ExpectHolds(tight, 1, Prompt(6));
  ExpectHolds(tight, 0, Prompt(20));
}

// Every single-bit flip of every byte, and every truncation, is refused.
TEST_F(SequenceFile, EveryFlippedByteAndEveryTruncationIsRefused) {
  CausalCache small(SeqOptions(1, 64, 4, 2));
  const std::vector<int> tokens = Prompt(3);
  Feed(small, 0, tokens, 0, 3);
  const CausalCache* save[] = {&small};
  SaveSequence(dir_.File("small.safetensors"), save, 0, tokens, {{"k", "v"}});
  const std::vector<std::byte> valid = ReadBytes(dir_.File("small.safetensors"));
  CausalCache* load[] = {&small};
  ASSERT_EQ(SequenceLoadRefusal(valid, load, 1), "(loaded)");
  ExpectHolds(small, 1, tokens);
  small.Remove(1, 0, kEndOfSequence);
  ExpectEveryFlipAndTruncationRefused(valid, load, 1);
  EXPECT_EQ(small.UsedBlocks(), 1);
}

// Each loader names the others' files instead of misreading them.
TEST_F(SequenceFile, OtherFormatsAreRefusedByNameBothWays) {
  const std::vector<int> tokens = Prompt(6);
  FeedBoth(2, tokens);
  const std::vector<std::byte> sequence_file = Saved(2, tokens);
  try {
    (void)LoadCachesFromMemory(sequence_file);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("[LoadCaches] format \"ringkv.sequence\" is not "
                                         "\"ringkv.caches\": it is a sequence file (LoadSequence"),
              std::string::npos)
        << e.what();
  }
  LayerCaches model = Model();
  PromptCache prompts(model, {});
  try {
    prompts.LoadFromMemory(sequence_file);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a sequence file"), std::string::npos) << e.what();
  }
  Context ctx;
  Step(model, 4, 1, DType::kF32, ctx);
  SaveCaches(dir_.File("caches.safetensors"), model, Prompt(4));
  EXPECT_NE(Refusal(ReadBytes(dir_.File("caches.safetensors")), 3)
                .find("[LoadSequence] format \"ringkv.caches\" is not \"ringkv.sequence\": it is "
                      "a caches file (LoadCaches reads it)"),
            std::string::npos);
  prompts.Commit(Prompt(4));
  prompts.Save(dir_.File("prompts.safetensors"));
  EXPECT_NE(Refusal(ReadBytes(dir_.File("prompts.safetensors")), 3)
                .find("it is a prompt cache file (PromptCache::Load reads it)"),
            std::string::npos);
  EXPECT_TRUE(sliding_.SequencePositions(3).empty());
}

TEST_F(SequenceFile, SaveRefusesBadInputAndWritesNothing) {
  FeedBoth(2, Prompt(10));
  const CausalCache* caches[] = {&sliding_, &global_};
  const std::string path = dir_.File("bad.safetensors");
  EXPECT_NE(ErrorOf([&] {
              SaveSequence(path, caches, 4);
            }).find("[SaveSequence] seq 4 holds no tokens in caches[0]"),
            std::string::npos);
  Feed(global_, 2, Prompt(11), 10, 11);
  EXPECT_NE(ErrorOf([&] {
              SaveSequence(path, caches, 2);
            }).find("seq 2 ends at position 10 in caches[1], 9 in caches[0]"),
            std::string::npos);
  Feed(sliding_, 2, Prompt(11), 10, 11);
  EXPECT_NE(ErrorOf([&] {
              SaveSequence(path, caches, 2, {}, {{"k", "\xff"}});
            }).find("[SaveSequence] metadata value of key \"k\""),
            std::string::npos);
  const CausalCache* none[] = {nullptr};
  EXPECT_NE(ErrorOf([&] { SaveSequence(path, none, 2); }).find("caches[0] is null"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(std::filesystem::directory_iterator(dir_.Path()),
            std::filesystem::directory_iterator());
}

}  // namespace
}  // namespace ringkv::test
