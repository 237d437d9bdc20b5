// Bad caches files: every one is refused with a SnapshotError "[LoadCaches] ..."
// naming the problem, without a crash or an allocation out of proportion to
// the file.
#include <gtest/gtest.h>

#include <climits>
#include <set>
#include <string>
#include <vector>

#include "cache_file_test_util.h"

namespace ringkv::test {
namespace {

using nlohmann::json;
using HostileCacheFile = CacheFileTest;

// Every single-bit flip of every byte, and every truncation, is refused.
TEST_F(HostileCacheFile, EveryFlippedByteAndEveryTruncationIsRefused) {
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

TEST_F(HostileCacheFile, EditedFilesAreRefusedNamingTheProblem) {
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
TEST_F(HostileCacheFile, BlocksFarLargerThanTheirTokensAreRefused) {
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

TEST_F(HostileCacheFile, NotACachesFile) {
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

}  // namespace
}  // namespace ringkv::test
