// Save's temporary files: bounded names, the replaced file's mode kept, and
// stale temporaries of killed saves cleaned up by the next save to the directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "prompt_test_util.h"
#include "ringkv/error.h"
#include "scratch_dir.h"

namespace ringkv::test {
namespace {

constexpr std::size_t kLots = std::size_t{1} << 30;

class Saving : public ::testing::Test {
 protected:
  void SetUp() override { Serve(pc_, caches_, Seq(10, 5)); }

  std::set<std::string> Files() const {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.Path())) {
      names.insert(e.path().filename().string());
    }
    return names;
  }

  void Touch(const std::string& name, int age_seconds) const {
    const std::string path = dir_.File(name);
    std::ofstream(path) << "partial";
    const timeval now = [] {
      timeval t{};
      ::gettimeofday(&t, nullptr);
      return t;
    }();
    const timeval times[2] = {{now.tv_sec - age_seconds, 0}, {now.tv_sec - age_seconds, 0}};
    ASSERT_EQ(::utimes(path.c_str(), times), 0);
  }

  ScratchDir dir_;
  LayerCaches caches_ = LayerCaches::Interleaved(2, 2, 4, 4);
  PromptCache pc_{caches_, Options(kLots)};
};

// The temporary name used to be the target's name plus 17 characters, so a
// valid name of more than NAME_MAX - 17 characters could not be saved.
TEST_F(Saving, LongestValidNameSaves) {
  const std::string name(NAME_MAX, 'x');
  const std::string path = dir_.File(name);
  ASSERT_NO_THROW(pc_.Save(path));
  EXPECT_EQ(Files(), std::set<std::string>{name});
  LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 4);
  PromptCache loaded(caches, Options(kLots));
  ASSERT_NO_THROW(loaded.Load(path));
  EXPECT_EQ(loaded.Nodes().size(), 1u);
}

// Re-saving over a 0600 file made it 0644: the replacement keeps the mode.
TEST_F(Saving, KeepsTheModeOfTheFileItReplaces) {
  const std::string path = dir_.File("private.safetensors");
  pc_.Save(path);
  for (const auto mode : {std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                          std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                              std::filesystem::perms::group_read}) {
    std::filesystem::permissions(path, mode);
    pc_.Save(path);
    EXPECT_EQ(std::filesystem::status(path).permissions(), mode);
  }
  // A new file gets 0666 & ~umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  const std::string fresh = dir_.File("fresh.safetensors");
  pc_.Save(fresh);
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

// Saves killed mid-way (kill -9) left temporaries nothing removed. The next save
// to the directory removes ringkv's stale ones: its naming
// (<name>.tmp.<pid>.<8 hex digits>), a regular file, untouched for 10 minutes
// and its process gone, or untouched for a day. Nothing else.
TEST_F(Saving, RemovesStaleTemporariesOfItsOwnNaming) {
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  long pid_max = 0;
  pid_max_file >> pid_max;
  ASSERT_GT(pid_max, 0);
  const std::string gone = std::to_string(pid_max + 1);  // no process can have it
  const std::string alive = std::to_string(::getpid());
  const int hour = 3600, day = 24 * 3600;
  // Removed:
  Touch("a.safetensors.tmp." + gone + ".0123abcd", hour);
  Touch("other.bin.tmp." + gone + ".ffffffff", hour);
  Touch("b.safetensors.tmp." + alive + ".00000000", 2 * day);
  // Kept: recent, a live process within a day, not our naming, not a file.
  Touch("c.safetensors.tmp." + gone + ".0123abcd", 60);
  Touch("d.safetensors.tmp." + alive + ".0123abcd", hour);
  Touch("e.tmp." + gone + ".0123abc", hour);   // 7 hex digits
  Touch("f.tmp." + gone + ".0123ABCD", hour);  // upper case
  Touch("g.tmp.12x4.0123abcd", hour);          // not a pid
  Touch("h.safetensors.tmp." + gone, hour);    // no random part
  Touch("notes.tmp.txt", day * 3);
  std::filesystem::create_directory(dir_.File("i.tmp." + gone + ".0123abcd"));
  const std::set<std::string> before = Files();
  pc_.Save(dir_.File("cache.safetensors"));
  std::set<std::string> expected = before;
  expected.erase("a.safetensors.tmp." + gone + ".0123abcd");
  expected.erase("other.bin.tmp." + gone + ".ffffffff");
  expected.erase("b.safetensors.tmp." + alive + ".00000000");
  expected.insert("cache.safetensors");
  EXPECT_EQ(Files(), expected);
}

// Two savers replace one file at once (threads of one process, so the clean-up
// of each save must leave the other's live temporary alone): the file always
// loads, as one of the two tries, and no temporary is left.
TEST_F(Saving, TwoConcurrentSavers) {
  const std::string path = dir_.File("shared.safetensors");
  LayerCaches other_caches = LayerCaches::Interleaved(2, 2, 4, 4);
  PromptCache other(other_caches, Options(kLots));
  Serve(other, other_caches, Seq(50, 9));
  std::atomic<bool> failed{false};
  auto saver = [&](const PromptCache& pc) {
    for (int i = 0; i < 100; ++i) {
      try {
        pc.Save(path);
      } catch (const Error&) {
        failed = true;
      }
    }
  };
  std::thread a(saver, std::cref(pc_));
  std::thread b(saver, std::cref(other));
  for (int i = 0; i < 50; ++i) {
    LayerCaches caches = LayerCaches::Interleaved(2, 2, 4, 4);
    PromptCache loaded(caches, Options(kLots));
    try {
      loaded.Load(path);
      ASSERT_EQ(loaded.Nodes().size(), 1u);
      const std::vector<int> tokens = loaded.Nodes()[0].tokens;
      EXPECT_TRUE(tokens == Seq(10, 5) || tokens == Seq(50, 9));
    } catch (const SnapshotError& e) {
      // Only before the first rename: the file does not exist yet.
      EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
    }
  }
  a.join();
  b.join();
  EXPECT_FALSE(failed);
  EXPECT_EQ(Files(), std::set<std::string>{"shared.safetensors"});
}

}  // namespace
}  // namespace ringkv::test
