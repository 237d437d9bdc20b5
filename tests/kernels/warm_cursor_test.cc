// WarmCursor (kernels/src/warm_cursor.h): which lines a prefill tile requests for
// its driver, and how many before each block. The expectations come from the
// rows' byte ranges, walked here line by line in the cursor's documented order
// (range, head, row, line).
#include "warm_cursor.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "attend_tile.h"

namespace ringkv::kernels {
namespace {

using Line = std::pair<std::uintptr_t, bool>;  // the line's address, requested for writing

struct Recorder {
  std::vector<Line>* seen;
  void operator()(const std::byte* line, bool write) const {
    seen->emplace_back(reinterpret_cast<std::uintptr_t>(line), write);
  }
};

// Every line of every row of w, row by row: from the line the row's first byte
// is in to the line of its last byte.
void AppendLines(const WarmRows& w, std::vector<Line>& out) {
  for (std::int64_t h = 0; h < w.heads; ++h) {
    for (std::int64_t r = 0; r < w.rows; ++r) {
      const auto start = reinterpret_cast<std::uintptr_t>(w.first) +
                         static_cast<std::uintptr_t>(h * w.head_stride + r * w.row_stride);
      const std::uintptr_t end = start + static_cast<std::uintptr_t>(w.bytes) - 1;
      for (std::uintptr_t a = start / 64 * 64; a <= end / 64 * 64; a += 64) {
        out.emplace_back(a, w.write);
      }
    }
  }
}

// An upper bound of the lines of w, as the cursor sizes its shares.
std::int64_t LineBound(const WarmRows& w) { return w.heads * w.rows * ((w.bytes + 63) / 64 + 1); }

class WarmCursorTest : public ::testing::Test {
 protected:
  WarmCursorTest() : q_(8192), out_(8192) {
    runs_[0] = KvRun{.begin = 0, .count = 100};
    runs_[1] = KvRun{.begin = 100, .count = 200};
    tile_.runs = runs_;
    tile_.run_count = 2;
    tile_.t0 = 50;   // run 0: keys 50-99, one block
    tile_.t1 = 250;  // run 1: keys 100-249, three blocks of 64, 64, 22
    tile_.block = 64;
    // Rows that start mid-line and end mid-line, two heads of three rows.
    tile_.warm[0] = WarmRows{.first = q_.data() + 8,
                             .head_stride = 1000,
                             .row_stride = 300,
                             .heads = 2,
                             .rows = 3,
                             .bytes = 200};
    tile_.warm[1] = WarmRows{.first = out_.data(),
                             .head_stride = 2048,
                             .row_stride = 512,
                             .heads = 2,
                             .rows = 2,
                             .bytes = 512,
                             .write = true};
  }

  std::vector<std::byte> q_;
  std::vector<std::byte> out_;
  KvRun runs_[2];
  AttendTile tile_;
};

TEST_F(WarmCursorTest, RequestsEveryLineOfBothRangesInOrderWithinTheBlocks) {
  std::vector<Line> expected;
  AppendLines(tile_.warm[0], expected);
  AppendLines(tile_.warm[1], expected);

  std::vector<Line> seen;
  WarmCursor<Recorder> cursor(tile_, Recorder{&seen});
  constexpr int kBlocks = 4;
  for (int b = 0; b < kBlocks; ++b) cursor.Step();
  EXPECT_TRUE(cursor.Done());
  EXPECT_EQ(seen, expected);
}

TEST_F(WarmCursorTest, EachStepRequestsOneBlocksShare) {
  const std::int64_t share = (LineBound(tile_.warm[0]) + LineBound(tile_.warm[1]) + 3) / 4;
  std::vector<Line> seen;
  WarmCursor<Recorder> cursor(tile_, Recorder{&seen});
  cursor.Step();
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), share);
  EXPECT_FALSE(cursor.Done());
  cursor.Step();
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), 2 * share);
}

TEST_F(WarmCursorTest, SkipsEmptyRangesAndRequestsNothingWithoutThem) {
  tile_.warm[0].rows = 0;
  std::vector<Line> expected;
  AppendLines(tile_.warm[1], expected);
  std::vector<Line> seen;
  WarmCursor<Recorder> one(tile_, Recorder{&seen});
  for (int b = 0; b < 4; ++b) one.Step();
  EXPECT_EQ(seen, expected);

  tile_.warm[1].first = nullptr;
  seen.clear();
  WarmCursor<Recorder> none(tile_, Recorder{&seen});
  none.Step();
  EXPECT_TRUE(none.Done());
  EXPECT_TRUE(seen.empty());
}

TEST_F(WarmCursorTest, RequestsNothingForATileWithoutKeys) {
  tile_.t1 = tile_.t0;
  std::vector<Line> seen;
  WarmCursor<Recorder> cursor(tile_, Recorder{&seen});
  cursor.Step();
  EXPECT_TRUE(seen.empty());
}

}  // namespace
}  // namespace ringkv::kernels
