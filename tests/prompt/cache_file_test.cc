// SaveCaches / LoadCaches: a LayerCaches written with the caller's tokens and
// metadata and read back restores every layer exactly (decoding on from the
// loaded caches gives the attention outputs of decoding on from the saved ones,
// bit for bit), and every bad file is refused with a SnapshotError naming it.
#include "ringkv/cache_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <climits>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "file_craft.h"
#include "prompt_test_util.h"
#include "ringkv/attention.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

using nlohmann::json;

constexpr std::int64_t kKvHeads = 2;
constexpr std::int64_t kQueryHeads = 4;
constexpr std::int64_t kHeadDim = 8;
constexpr int kWindow = 8;
constexpr std::int64_t kBlock = 3;  // divides neither the window nor the offsets

// Deterministic values in [-1, 1), from a per-call seed.
Tensor Values(const Shape& shape, std::uint32_t seed, DType dtype) {
  std::vector<float> values(static_cast<std::size_t>(shape.NumElements()));
  std::uint32_t state = 0x9E3779B9u * (seed + 1);
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * 0x1p-23f - 1.0f;
  }
  return Tensor::FromVector(values, shape, dtype);
}

// Three layers: sliding (window 8), sliding, global.
LayerCaches Model() { return LayerCaches::Interleaved(3, 3, kWindow, kBlock); }

// One forward chunk of `length` tokens: every layer's K/V appended and its
// attention output for queries of the step, per layer.
std::vector<std::vector<float>> Step(LayerCaches& caches, std::int64_t length, std::uint32_t seed,
                                     DType dtype, Context& ctx) {
  std::vector<std::vector<float>> outputs;
  for (std::size_t l = 0; l < caches.Size(); ++l) {
    const auto s = seed * 16 + static_cast<std::uint32_t>(l) * 3;
    const KVHistory history =
        caches[l].Update(Values({1, kKvHeads, length, kHeadDim}, s, dtype),
                         Values({1, kKvHeads, length, kHeadDim}, s + 1, dtype));
    const Tensor q = Values({1, kQueryHeads, length, kHeadDim}, s + 2, dtype);
    outputs.push_back(Attention(q, history, AttentionMask::Causal(), 0.35f, ctx).ToVector());
  }
  return outputs;
}

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

class CacheFile : public ::testing::Test {
 protected:
  // A small valid file: offset 5, tokens and one metadata entry.
  std::vector<std::byte> Valid() {
    LayerCaches caches = Model();
    Step(caches, 5, 1, DType::kF32, ctx_);
    SaveCaches(dir_.File("valid.safetensors"), caches, Seq(7, 5), {{"k", "v"}});
    return ReadBytes(dir_.File("valid.safetensors"));
  }

  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.Path())) {
      names.insert(e.path().filename().string());
    }
    return names;
  }

  ScratchDir dir_;
  Context ctx_;
};

// The whole message, for a refused file.
std::string Refusal(const std::vector<std::byte>& file) {
  try {
    (void)LoadCachesFromMemory(file);
  } catch (const SnapshotError& e) {
    return e.what();
  }
  return "(loaded)";
}

void ExpectRefused(const std::vector<std::byte>& file, const std::string& needle) {
  const std::string what = Refusal(file);
  EXPECT_EQ(what.rfind("[LoadCaches] ", 0), 0u) << what;
  EXPECT_NE(what.find(needle), std::string::npos) << what;
}

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

// Every single-bit flip of every byte, and every truncation, is refused.
TEST_F(CacheFile, EveryFlippedByteAndEveryTruncationIsRefused) {
  const std::vector<std::byte> valid = Valid();
  ASSERT_EQ(LoadCachesFromMemory(valid).caches.Offset(), 5);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    std::vector<std::byte> file = valid;
    file[i] ^= std::byte{0x01};
    const std::string what = Refusal(file);
    ASSERT_EQ(what.rfind("[LoadCaches] ", 0), 0u) << "byte " << i << ": " << what;
  }
  for (std::size_t size = 0; size < valid.size(); ++size) {
    const std::string what =
        Refusal(std::vector<std::byte>(valid.begin(), valid.begin() + static_cast<long>(size)));
    ASSERT_EQ(what.rfind("[LoadCaches] ", 0), 0u) << "size " << size << ": " << what;
  }
}

// A caches file taken apart, edited and put back together with a valid
// metadata checksum (recomputed independently: XXH3 over each entry's key and
// value, each prefixed by its length), so the loader gets past that check.
struct Edited {
  json header;
  json caches;
  std::vector<std::byte> data;

  explicit Edited(const std::vector<std::byte>& file) {
    const std::uint64_t n = CraftedFile::LengthField(file);
    const auto* text = reinterpret_cast<const char*>(file.data() + 8);
    header = json::parse(text, text + n);
    caches = json::parse(header["__metadata__"]["caches"].get<std::string>());
    data.assign(file.begin() + static_cast<long>(8 + n), file.end());
  }

  json& Meta() { return header["__metadata__"]; }

  std::vector<std::byte> Bytes(bool fix_checksum = true) {
    Meta()["caches"] = caches.dump();
    if (fix_checksum) {
      std::string joined;
      for (const auto& [key, value] : Meta().items()) {
        if (key == "metadata_checksum") continue;
        const std::string& v = value.get_ref<const std::string&>();
        joined += std::to_string(key.size()) + ":" + key + std::to_string(v.size()) + ":" + v;
      }
      Meta()["metadata_checksum"] = CraftedFile::Hex(XXH3_64bits(joined.data(), joined.size()));
    }
    return CraftedFile::Assemble(header.dump(), data);
  }
};

TEST_F(CacheFile, EditedFilesAreRefusedNamingTheProblem) {
  const std::vector<std::byte> valid = Valid();
  ASSERT_EQ(LoadCachesFromMemory(Edited(valid).Bytes()).tokens,
            Seq(7, 5));  // the editor is faithful
  {
    Edited f(valid);
    f.Meta()["tokens"] = "[1,2]";
    ExpectRefused(f.Bytes(/*fix_checksum=*/false), "the metadata has checksum");
  }
  {
    Edited f(valid);
    json checksums = json::parse(f.Meta()["checksums"].get<std::string>());
    checksums["l2.values"] = "0123456789abcdef";
    f.Meta()["checksums"] = checksums.dump();
    ExpectRefused(f.Bytes(), "tensor l2.values has checksum");
  }
  {
    Edited f(valid);
    f.data[f.data.size() - 1] ^= std::byte{0x40};
    ExpectRefused(f.Bytes(), "tensor l2.values has checksum");
  }
  {
    Edited f(valid);
    f.Meta()["extra"] = "x";
    ExpectRefused(f.Bytes(), "__metadata__ has key \"extra\", neither ringkv's nor the caller's");
  }
  {
    Edited f(valid);
    f.Meta()["version"] = "2";
    ExpectRefused(f.Bytes(), "version 2 is not supported (expected 1)");
  }
  {
    Edited f(valid);
    f.Meta()["tokens"] = "[1, 2.5]";
    ExpectRefused(f.Bytes(), "__metadata__.tokens has token 2.5, not an int");
  }
  {
    Edited f(valid);
    f.caches["offset"] = 6;
    ExpectRefused(f.Bytes(), "caches.layers[0].state covers [0, 5), the caches [0, 6)");
  }
  {
    Edited f(valid);
    f.caches["layers"][1]["state"]["ring_index"] = 2;
    ExpectRefused(f.Bytes(), "a window of 8 at offset 5 cannot hold 5 slots with ring index 2");
  }
  {
    Edited f(valid);
    f.caches["layers"][2]["kind"] = "sliding";
    f.caches["layers"][2]["window"] = 3;
    ExpectRefused(f.Bytes(), "caches.layers[2].state: a window of 3 at offset 5 cannot hold");
  }
  {
    Edited f(valid);
    f.caches["layers"][0]["kv"]["dtype"] = "F16";
    ExpectRefused(f.Bytes(), "tensor l0.keys is f32 [1, 2, 5, 8], expected f16");
  }
  {
    Edited f(valid);
    f.caches["layers"][0]["state"] = nullptr;
    ExpectRefused(f.Bytes(), "caches.layers[0] has no state and kv set");
  }
  {
    Edited f(valid);
    f.caches["layers"].erase(2);
    ExpectRefused(f.Bytes(), "tensor l2.keys belongs to no layer");
  }
  {
    Edited f(valid);  // two tensors over the same bytes
    f.header["l2.values"]["data_offsets"] = f.header["l2.keys"]["data_offsets"];
    ExpectRefused(f.Bytes(), "overlap");
  }
}

// A block is allocated whole, so a file stating huge blocks around a few tokens
// would allocate far more than its size: refused before anything is allocated,
// and SaveCaches never writes such a file.
TEST_F(CacheFile, BlocksFarLargerThanTheirTokensAreRefused) {
  Edited f(Valid());
  f.caches["layers"][2]["block_tokens"] = INT_MAX;
  ExpectRefused(f.Bytes(), "beyond their tokens, over the limit of 268435456");

  // 3 layers of 2 * 2 * 8 * 4 = 128 bytes a token: blocks of 2^20 tokens hold
  // 384 MiB beyond the 1 token each.
  LayerCaches huge = LayerCaches::Interleaved(3, 3, kWindow, std::int64_t{1} << 20);
  Step(huge, 1, 1, DType::kF32, ctx_);
  const std::string path = dir_.File("huge.safetensors");
  EXPECT_THROW(
      {
        try {
          SaveCaches(path, huge);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("[SaveCaches] caches: their blocks hold"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(Files(), std::set<std::string>{"valid.safetensors"});
}

TEST_F(CacheFile, NotACachesFile) {
  ExpectRefused({}, "fewer than the 8-byte header length");
  try {
    (void)LoadCaches(dir_.File("missing.safetensors"));
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("[LoadCaches] cannot open"), std::string::npos)
        << e.what();
  }
  try {
    (void)LoadCaches(dir_.Path().string());
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
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
