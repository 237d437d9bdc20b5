// SaveCaches / LoadCaches: a LayerCaches written with the caller's tokens and
// metadata and read back restores every layer exactly (decoding on from the
// loaded caches gives the attention outputs of decoding on from the saved ones,
// bit for bit); saves that fail leave nothing behind.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <climits>
#include <csignal>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "cache_file_test_util.h"

namespace ringkv::test {
namespace {

using CacheFile = CacheFileTest;

struct Phase {
  const char* name;
  std::vector<std::int64_t> chunks;  // forward chunks before the save (1: a decode step)
  DType dtype;
};

void PrintTo(const Phase& p, std::ostream* os) { *os << p.name; }

std::vector<std::int64_t> Decode(std::int64_t prefill, int steps) {
  std::vector<std::int64_t> chunks = {prefill};
  chunks.insert(chunks.end(), static_cast<std::size_t>(steps), 1);
  return chunks;
}

class RoundTrip : public ::testing::TestWithParam<Phase> {
 protected:
  ScratchDir dir_;
  Context ctx_;
};

// Saved at the phase, loaded, then both decode on (steps, then a chunk, then
// steps) with the same inputs: every layer's outputs agree bit for bit.
TEST_P(RoundTrip, DecodingOnFromTheLoadedCachesIsBitIdentical) {
  const Phase& phase = GetParam();
  LayerCaches original = Model();
  std::uint32_t seed = 1;
  for (const std::int64_t chunk : phase.chunks) Step(original, chunk, seed++, phase.dtype, ctx_);
  const int offset = original.Offset();
  const std::vector<int> tokens = Seq(500, offset);
  const std::string path = dir_.File("caches.safetensors");
  SaveCaches(path, original, tokens, {{"model", "tiny"}});

  SavedCaches loaded = LoadCaches(path);
  EXPECT_EQ(loaded.tokens, tokens);
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"model", "tiny"}}));
  ASSERT_EQ(loaded.caches.Size(), original.Size());
  EXPECT_EQ(loaded.caches.Offsets(), original.Offsets());
  for (std::size_t l = 0; l < original.Size(); ++l) {
    if (const auto* ring = dynamic_cast<const RotatingKVCache*>(&original[l])) {
      const auto* got = dynamic_cast<const RotatingKVCache*>(&loaded.caches[l]);
      ASSERT_NE(got, nullptr) << "layer " << l;
      EXPECT_EQ(got->MaxSize(), ring->MaxSize());
      EXPECT_EQ(got->BlockTokens(), ring->BlockTokens());
      EXPECT_EQ(got->RingIndex(), ring->RingIndex()) << "layer " << l;
      EXPECT_EQ(got->BufferLength(), std::min<std::int64_t>(ring->BufferLength(), offset));
    } else {
      const auto* got = dynamic_cast<const KVCache*>(&loaded.caches[l]);
      ASSERT_NE(got, nullptr) << "layer " << l;
      EXPECT_EQ(got->BlockTokens(), dynamic_cast<const KVCache&>(original[l]).BlockTokens());
    }
  }
  for (const std::int64_t chunk : std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1}) {
    const auto expected = Step(original, chunk, seed, phase.dtype, ctx_);
    const auto got = Step(loaded.caches, chunk, seed, phase.dtype, ctx_);
    ++seed;
    for (std::size_t l = 0; l < expected.size(); ++l) {
      ASSERT_EQ(got[l], expected[l]) << "layer " << l << " at offset " << original.Offset();
    }
  }
}

// Before the ring wraps (offset <= window), after it wraps in decode (ring index
// inside the window), and right after a prefill chunk past the window (the ring
// holds more slots than the window).
INSTANTIATE_TEST_SUITE_P(CacheFile, RoundTrip,
                         ::testing::Values(Phase{"f32_before_wrap", Decode(5, 2), DType::kF32},
                                           Phase{"f16_before_wrap", Decode(5, 2), DType::kF16},
                                           Phase{"bf16_before_wrap", Decode(5, 2), DType::kBF16},
                                           Phase{"f32_wrapped", Decode(6, 7), DType::kF32},
                                           Phase{"f16_wrapped", Decode(6, 7), DType::kF16},
                                           Phase{"bf16_wrapped", Decode(6, 7), DType::kBF16},
                                           Phase{"f32_prefill_past_window", {4, 9}, DType::kF32},
                                           Phase{"bf16_prefill_past_window", {4, 9}, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Phase>& p) {
                           return std::string(p.param.name);
                         });

TEST_F(CacheFile, TokensAndMetadataRoundTrip) {
  LayerCaches caches = Model();
  Step(caches, 3, 1, DType::kF32, ctx_);
  // Any ints, any number (not tied to the offset); keys that look like ringkv's own.
  const std::vector<int> tokens = {INT_MIN, -200, 0, INT_MAX, 7, 7, 7, 7, 7};
  const std::map<std::string, std::string> metadata = {{"", "empty key"},
                                                       {"format", "not ringkv's"},
                                                       {"metadata_checksum", "0"},
                                                       {"user.nested", "prefix twice"},
                                                       {"modèle", "日本語 ✓ \xF0\x9F\x98\x80"},
                                                       {"empty", ""},
                                                       {"quote\"back\\slash\nnewline", "\t\x01"}};
  const std::string path = dir_.File("t.safetensors");
  SaveCaches(path, caches, tokens, metadata);
  const SavedCaches loaded = LoadCaches(path);
  EXPECT_EQ(loaded.tokens, tokens);
  EXPECT_EQ(loaded.metadata, metadata);

  SaveCaches(path, caches);  // neither
  const SavedCaches bare = LoadCaches(path);
  EXPECT_TRUE(bare.tokens.empty());
  EXPECT_TRUE(bare.metadata.empty());
  EXPECT_EQ(bare.caches.Offset(), 3);
}

// Offset 0: every layer comes back empty and of its kind, and takes any layout.
TEST_F(CacheFile, EmptyCaches) {
  const std::string path = dir_.File("empty.safetensors");
  SaveCaches(path, Model(), {}, {{"note", "nothing yet"}});
  SavedCaches loaded = LoadCaches(path);
  ASSERT_EQ(loaded.caches.Size(), 3u);
  EXPECT_EQ(loaded.caches.Offsets(), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(dynamic_cast<RotatingKVCache&>(loaded.caches[0]).MaxSize(), kWindow);
  EXPECT_EQ(dynamic_cast<RotatingKVCache&>(loaded.caches[1]).BlockTokens(), kBlock);
  EXPECT_EQ(dynamic_cast<KVCache&>(loaded.caches[2]).BlockTokens(), kBlock);
  EXPECT_EQ(loaded.metadata.at("note"), "nothing yet");
  Step(loaded.caches, 2, 3, DType::kBF16, ctx_);
  EXPECT_EQ(loaded.caches.Offset(), 2);

  SaveCaches(path, LayerCaches({}));  // no layers at all
  EXPECT_EQ(LoadCaches(path).caches.Size(), 0u);
}

// A storage dtype (the caches convert every input to it) is part of each layer:
// it comes back with the layer, also when nothing is stored yet, so the loaded
// caches go on converting f32 input into the same stored bits.
TEST_F(CacheFile, StorageDtypeRoundTrips) {
  const std::string path = dir_.File("storage.safetensors");
  for (const int tokens : {0, 4}) {
    SCOPED_TRACE(tokens);
    LayerCaches saved = LayerCaches::Interleaved(3, 3, kWindow, kBlock, DType::kBF16);
    if (tokens > 0) Step(saved, tokens, 1, DType::kF32, ctx_);
    SaveCaches(path, saved);
    SavedCaches loaded = LoadCaches(path);
    for (std::size_t l = 0; l < 3; ++l) {
      const AttentionCache& layer = loaded.caches[l];
      const std::optional<DType> dtype =
          l < 2 ? dynamic_cast<const RotatingKVCache&>(layer).StorageDtype()
                : dynamic_cast<const KVCache&>(layer).StorageDtype();
      EXPECT_EQ(dtype, DType::kBF16) << "layer " << l;
    }
    EXPECT_EQ(Step(loaded.caches, 2, 9, DType::kF32, ctx_), Step(saved, 2, 9, DType::kF32, ctx_));
  }
  SaveCaches(path, Model());
  const SavedCaches plain = LoadCaches(path);
  EXPECT_EQ(dynamic_cast<const KVCache&>(plain.caches[2]).StorageDtype(), std::nullopt);
}

// Each format's loader names the other's file instead of failing on its contents.
TEST_F(CacheFile, PromptCacheFilesAndCachesFilesAreToldApart) {
  LayerCaches caches = Model();
  PromptCache pc(caches, Options(std::size_t{1} << 30));
  const std::vector<int> tokens = Seq(10, 6);
  Serve(pc, caches, tokens);
  const std::string prompt_path = dir_.File("prompt.safetensors");
  pc.Save(prompt_path);
  try {
    (void)LoadCaches(prompt_path);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_STREQ(e.what(),
                 "[LoadCaches] format \"ringkv.prompt_cache\" is not \"ringkv.caches\": it is a "
                 "prompt cache file (PromptCache::Load reads it)");
  }
  const std::string caches_path = dir_.File("caches.safetensors");
  SaveCaches(caches_path, caches, tokens);
  const std::vector<PromptNodeInfo> before = pc.Nodes();
  try {
    pc.Load(caches_path);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_STREQ(e.what(),
                 "[PromptCache::Load] format \"ringkv.caches\" is not \"ringkv.prompt_cache\": it "
                 "is a caches file (LoadCaches reads it)");
  }
  EXPECT_EQ(pc.Nodes().size(), before.size());
}

// Refused before anything is written: the file being replaced stays as it was.
TEST_F(CacheFile, BadArgumentsWriteNothing) {
  const std::vector<std::byte> valid = Valid();
  const std::string path = dir_.File("valid.safetensors");
  LayerCaches uneven = Model();
  uneven[0].Update(Values({1, kKvHeads, 1, kHeadDim}, 1, DType::kF32),
                   Values({1, kKvHeads, 1, kHeadDim}, 2, DType::kF32));
  try {
    SaveCaches(path, uneven);
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[SaveCaches] caches: the layers are at different offsets [1, 0, 0]");
  }
  try {
    SaveCaches(path, Model(), {}, {{"bad\xff", "v"}});
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[SaveCaches] metadata key (bytes 626164ff) is not valid UTF-8");
  }
  try {
    SaveCaches(path, Model(), {}, {{"k", "\xc3"}});
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[SaveCaches] metadata value of key \"k\" (bytes c3) is not valid UTF-8");
  }
  EXPECT_EQ(ReadBytes(path), valid);
  EXPECT_EQ(Files(), std::set<std::string>{"valid.safetensors"});
}

// Restores the file size limit and SIGXFSZ's handler on exit.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // write() fails with EFBIG instead
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

// A save that fails at any step leaves neither a file nor a temporary file,
// and the file it would have replaced is intact.
TEST_F(CacheFile, FailedSavesLeaveNothingBehind) {
  LayerCaches caches = Model();
  Step(caches, 5, 1, DType::kF32, ctx_);
  EXPECT_THROW(SaveCaches(dir_.File("no/such/dir/c.safetensors"), caches), Error);
  EXPECT_TRUE(Files().empty());

  // The target is a directory: the temporary file is written, the rename fails.
  std::filesystem::create_directories(dir_.File("occupied/inside"));
  EXPECT_THROW(SaveCaches(dir_.File("occupied"), caches), Error);
  EXPECT_EQ(Files(), std::set<std::string>{"occupied"});

  // The disk fills up mid-write.
  const std::vector<std::byte> valid = Valid();
  const std::string path = dir_.File("valid.safetensors");
  {
    const FileSizeLimit limit(valid.size() / 2);
    try {
      SaveCaches(path, caches, Seq(0, 100));
      ADD_FAILURE() << "saved";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[SaveCaches] cannot write"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(ReadBytes(path), valid);
  EXPECT_EQ(Files(), (std::set<std::string>{"occupied", "valid.safetensors"}));
}

}  // namespace
}  // namespace ringkv::test
