// Hostile prompt cache files: each is refused with a SnapshotError naming the
// problem, promptly, without a crash, and with memory in proportion to the
// budget, and the prompt cache is left unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

#include "alloc_tracker.h"
#include "file_craft.h"
#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

using nlohmann::json;

constexpr std::size_t kLots = std::size_t{1} << 30;

LayerCaches Mixed() { return LayerCaches::Interleaved(3, 2, 4, 4); }

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    LayerCaches caches = Mixed();
    PromptCache source(caches, Options(kLots));
    const std::vector<int> system = Seq(100, 6);
    Serve(source, caches, system);
    source.Pin(system);
    Serve(source, caches, Cat(system, Seq(200, 5)));
    Serve(source, caches, Cat(system, Seq(300, 7)));
    source.Save(dir_.File("valid.safetensors"));
    valid_ = ReadBytes(dir_.File("valid.safetensors"));
    Serve(target_, target_caches_, Seq(40, 9));
    nodes_before_ = target_.Nodes();
    bytes_before_ = target_.Stats().bytes;
  }

  // Must throw SnapshotError "[PromptCache::Load] ..." containing `needle`, and change nothing.
  void ExpectRefused(const std::function<void()>& load, const std::string& needle) {
    try {
      load();
      ADD_FAILURE() << "loaded";
    } catch (const SnapshotError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("[PromptCache::Load] ", 0), 0u) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
    const std::vector<PromptNodeInfo> after = target_.Nodes();
    ASSERT_EQ(after.size(), nodes_before_.size());
    for (std::size_t i = 0; i < after.size(); ++i)
      EXPECT_EQ(after[i].tokens, nodes_before_[i].tokens);
    EXPECT_EQ(target_.Stats().bytes, bytes_before_);
    ExpectBytes(target_);
  }
  void ExpectRefused(const std::vector<std::byte>& file, const std::string& needle) {
    ExpectRefused([&] { target_.LoadFromMemory(file); }, needle);
  }

  ScratchDir dir_;
  std::vector<std::byte> valid_;
  LayerCaches target_caches_ = Mixed();
  PromptCache target_{target_caches_, Options(kLots)};
  std::vector<PromptNodeInfo> nodes_before_;
  std::size_t bytes_before_ = 0;
};

// A tensor shape holding a deeply nested array crashed the loader (a stack
// overflow while printing it in the error message). The nesting depth is
// bounded before parsing.
TEST_F(Hostile, DeeplyNestedShape) {
  const std::uint64_t n = CraftedFile::LengthField(valid_);
  std::string header(reinterpret_cast<const char*>(valid_.data() + 8), n);
  const std::size_t at = header.find("\"shape\":[");
  ASSERT_NE(at, std::string::npos);
  const std::size_t close = header.find(']', at);
  // [1, 1, <deep>, 2]: four entries, one of them not an integer.
  const int depth = 200000;
  header.replace(at + 8, close - at - 7,
                 "[1,1," + std::string(depth, '[') + std::string(depth, ']') + ",2]");
  const std::vector<std::byte> data(valid_.begin() + static_cast<std::ptrdiff_t>(8 + n),
                                    valid_.end());
  ExpectRefused(CraftedFile::Assemble(header, data), "nested");
}

// Embedded texts (the node list) are bounded the same way: a token that is a
// deep array crashed the loader too.
TEST_F(Hostile, DeeplyNestedToken) {
  CraftedFile f = CraftedFile::Parse(valid_);
  std::string nodes = f.nodes.dump();
  const std::size_t at = nodes.find("\"tokens\":[100,101,");
  ASSERT_NE(at, std::string::npos);
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  nodes.replace(at + 14, 3, deep);
  json header = f.header;
  const std::string m = f.model.dump(), c = f.checksums.dump();
  const std::string joined = std::to_string(m.size()) + ":" + m + std::to_string(nodes.size()) +
                             ":" + nodes + std::to_string(c.size()) + ":" + c;
  header["__metadata__"]["nodes"] = nodes;
  header["__metadata__"]["metadata_checksum"] =
      CraftedFile::Hex(XXH3_64bits(joined.data(), joined.size()));
  ExpectRefused(CraftedFile::Assemble(header.dump(), f.data), "nested");
}

// A FIFO blocked Load forever (open and read wait for a writer). A watchdog
// opens the other end after 20 s so that a regression fails instead of hanging.
TEST_F(Hostile, Fifo) {
  const std::string fifo = dir_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (!done_cv.wait_for(lock, std::chrono::seconds(20), [&] { return done; })) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  });
  ExpectRefused([&] { target_.Load(fifo); }, "not a regular file");
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  done_cv.notify_one();
  watchdog.join();
}

// A symlink to /dev/zero read until allocation failed (2 GB).
TEST_F(Hostile, SymlinkToACharacterDevice) {
  const std::string link = dir_.File("zero.safetensors");
  std::filesystem::create_symlink("/dev/zero", link);
  ExpectRefused([&] { target_.Load(link); }, "not a regular file");
  // A directory is not a file either.
  ExpectRefused([&] { target_.Load(dir_.Path().string()); }, "not a regular file");
}

// A symlink to a regular file loads like the file.
TEST_F(Hostile, SymlinkToAFileLoads) {
  const std::string link = dir_.File("link.safetensors");
  std::filesystem::create_symlink(dir_.File("valid.safetensors"), link);
  LayerCaches caches = Mixed();
  PromptCache loaded(caches, Options(kLots));
  ASSERT_NO_THROW(loaded.Load(link));
  EXPECT_EQ(loaded.Nodes().size(), 3u);
}

// Two tensors naming the same bytes (aliasing), bytes no tensor names (a gap),
// and ranges that overlap partly: every data byte belongs to exactly one tensor.
TEST_F(Hostile, TensorRangesMustTileTheData) {
  const CraftedFile base = CraftedFile::Parse(valid_);
  // Two tensors of one shape, where the second is moved onto the first.
  std::string first, second;
  for (const auto& [name, info] : base.header.items()) {
    if (name == "__metadata__") continue;
    for (const auto& [other, other_info] : base.header.items()) {
      if (other == "__metadata__" || other == name) continue;
      if (other_info["shape"] == info["shape"] && first.empty()) {
        first = name;
        second = other;
      }
    }
  }
  ASSERT_FALSE(first.empty());
  {
    CraftedFile f = base;
    f.header[second]["data_offsets"] = f.header[first]["data_offsets"];
    f.RecomputeTensorChecksums();  // only the ranges are wrong
    ExpectRefused(f.Bytes(), "overlap");
  }
  {
    // Shift one tensor by 4 bytes into its neighbour's range.
    CraftedFile f = base;
    const auto b = f.header[second]["data_offsets"][0].get<std::uint64_t>();
    const auto e = f.header[second]["data_offsets"][1].get<std::uint64_t>();
    if (b >= 4) {
      f.header[second]["data_offsets"] = {b - 4, e - 4};
      f.RecomputeTensorChecksums();
      ExpectRefused(f.Bytes(), "overlap");
    }
  }
  {
    // A gap: one tensor moved past the end of the data, the data grown to match.
    CraftedFile f = base;
    const auto b = f.header[second]["data_offsets"][0].get<std::uint64_t>();
    const auto e = f.header[second]["data_offsets"][1].get<std::uint64_t>();
    const std::uint64_t size = f.data.size();
    f.data.insert(f.data.end(), f.data.begin() + static_cast<std::ptrdiff_t>(b),
                  f.data.begin() + static_cast<std::ptrdiff_t>(e));
    f.header[second]["data_offsets"] = {size, size + (e - b)};
    f.RecomputeTensorChecksums();
    ExpectRefused(f.Bytes(), "not covered");
  }
}

// A broken ring invariant is refused whatever the budget: a node the budget
// drops is checked from its header, not skipped.
TEST_F(Hostile, BrokenRingIsRefusedWhateverTheBudget) {
  CraftedFile f = CraftedFile::Parse(valid_);
  bool changed = false;
  for (json& node : f.nodes) {
    json& window = node["layers"][0];  // layer 0 is sliding (window 4)
    if (!changed && window.is_object() && window["to"].get<int>() > 4) {
      window["ring_index"] = 0;
      changed = true;
    }
  }
  ASSERT_TRUE(changed);
  const std::vector<std::byte> file = f.Bytes();
  ExpectRefused(file, "cannot hold");
  LayerCaches caches = Mixed();
  PromptCache tiny(caches, Options(8 * kTokenBytes));
  try {
    tiny.LoadFromMemory(file);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold"), std::string::npos) << e.what();
  }
}

// Negative token ids: Commit accepted them and Load refused them. The rule is
// now the same at both ends: any int is a token id.
TEST(PromptTokens, NegativeIdsRoundTrip) {
  ScratchDir dir;
  LayerCaches caches = Mixed();
  PromptCache pc(caches, Options(kLots));
  const std::vector<int> prompt = {
      -200, 5, -1, 7, std::numeric_limits<int>::min(), 9, std::numeric_limits<int>::max()};
  Serve(pc, caches, prompt);
  pc.Save(dir.File("negative.safetensors"));
  LayerCaches other = Mixed();
  PromptCache loaded(other, Options(kLots));
  ASSERT_NO_THROW(loaded.Load(dir.File("negative.safetensors")));
  ASSERT_EQ(loaded.Nodes().size(), 1u);
  EXPECT_EQ(loaded.Nodes()[0].tokens, prompt);
  std::vector<int> next = prompt;
  next.push_back(-3);
  EXPECT_EQ(loaded.Lookup(next).reused, 7);
  ExpectHolds(other, prompt);
}

// A fingerprint that is not valid UTF-8 cannot be written as JSON: refused when
// the prompt cache is made, with a ringkv::Error (it escaped from Save as a JSON
// library exception).
TEST(PromptFingerprint, InvalidUtf8IsRefusedUpFront) {
  LayerCaches caches = Mixed();
  for (const std::string& bad : {std::string("model \xff"), std::string("\xc3"),
                                 std::string("a\xed\xa0\x80"
                                             "b")}) {
    PromptCacheOptions o = Options(kLots);
    o.fingerprint = bad;
    try {
      PromptCache pc(caches, o);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[PromptCache] fingerprint"), std::string::npos)
          << e.what();
    }
  }
  PromptCacheOptions ok = Options(kLots);
  ok.fingerprint = "modèle \xe2\x9c\x93";
  EXPECT_NO_THROW(PromptCache(caches, ok));
}

// The header is capped (at max(16 MiB, budget / 16)) before it is parsed: a
// 60 MiB header used to take ~2 GB. Here a valid file padded to 17 MiB of
// header is refused under a 64 MiB budget, and loads under a 1 GiB one.
TEST_F(Hostile, OversizedHeader) {
  CraftedFile f = CraftedFile::Parse(valid_);
  std::string header = f.HeaderText();
  header.append((std::size_t{17} << 20) - header.size(), ' ');
  const std::vector<std::byte> file = CraftedFile::Assemble(header, f.data);
  LayerCaches caches = Mixed();
  PromptCache small(caches, Options(std::size_t{64} << 20));
  try {
    small.LoadFromMemory(file);
    ADD_FAILURE() << "loaded";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("over the limit of 16777216"), std::string::npos)
        << e.what();
  }
  PromptCache large(caches, Options(kLots));
  EXPECT_NO_THROW(large.LoadFromMemory(file));
}

}  // namespace
}  // namespace ringkv::test
