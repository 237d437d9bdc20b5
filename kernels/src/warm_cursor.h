#pragma once
// Walks the lines of a tile's WarmRows (attend_tile.h), a share before each of
// the tile's blocks, so that rows the driver touches around the tile arrive
// while it computes (docs/kernels.md, "Prefill softmax and warm rows"). The
// request itself is the caller's: the attend kernels prefetch, the tests record.
// Plain C++ in an anonymous namespace (see simd_compat-inl.h): each per-ISA unit
// and each test gets its own copy.
#include <cstddef>
#include <cstdint>

#include "attend_tile.h"

namespace ringkv::kernels {
namespace {

inline constexpr std::int64_t kWarmLineBytes = 64;

// The keys [first, end) of a run that lie in the tile's [t0, t1) (empty: end <= first).
struct RunKeys {
  std::int64_t first;
  std::int64_t end;
};
inline RunKeys KeysOf(const AttendTile& t, const KvRun& run) {
  return {run.begin > t.t0 ? run.begin : t.t0,
          run.begin + run.count < t.t1 ? run.begin + run.count : t.t1};
}

// Request: request(const std::byte* line, bool write), called once per line,
// with the line's first byte. Step() requests the next share: the lines of both
// ranges over the tile's block count, rounded up, so that one Step() per block
// requests them all. (Shares spread over the register tiles of the V step
// measured slower than one per block: docs/attention_tuning.md, "Prefill
// overheads".)
template <class Request>
class WarmCursor {
 public:
  explicit WarmCursor(const AttendTile& t, Request request = {}) : t_(t), request_(request) {
    std::int64_t lines = 0;  // an upper bound: a row may start anywhere in a line
    for (const WarmRows& w : t.warm) {
      if (Present(w)) {
        lines += w.heads * w.rows * ((w.bytes + kWarmLineBytes - 1) / kWarmLineBytes + 1);
      }
    }
    if (lines == 0) return;
    std::int64_t blocks = 0;
    for (std::int64_t ri = 0; ri < t.run_count; ++ri) {
      const RunKeys keys = KeysOf(t, t.runs[ri]);
      if (keys.end > keys.first) blocks += (keys.end - keys.first + t.block - 1) / t.block;
    }
    if (blocks == 0) return;
    per_step_ = (lines + blocks - 1) / blocks;
    range_ = -1;
    NextRange();
  }

  // Must be inlined, as the kernels' other requests (attend-inl.h, PrefetchRows).
  __attribute__((always_inline)) void Step() {
    for (std::int64_t n = 0; n < per_step_ && range_ < 2; ++n) {
      request_(line_, t_.warm[range_].write);
      line_ += kWarmLineBytes;
      if (line_ > last_) NextRow();
    }
  }

  // Whether every line has been requested.
  bool Done() const { return range_ >= 2; }

 private:
  static bool Present(const WarmRows& w) {
    return w.first != nullptr && w.heads > 0 && w.rows > 0 && w.bytes > 0;
  }
  // Moves to the next row of the range, or to the next range.
  void NextRow() {
    const WarmRows& w = t_.warm[range_];
    if (++row_ == w.rows) {
      row_ = 0;
      if (++head_ == w.heads) {
        NextRange();
        return;
      }
    }
    StartRow();
  }
  // Moves to the first row of the next range that has one (range_ 2: none left).
  void NextRange() {
    for (++range_; range_ < 2 && !Present(t_.warm[range_]); ++range_) {
    }
    head_ = 0;
    row_ = 0;
    if (range_ < 2) StartRow();
  }
  // The row's lines: from the line it starts in to the line of its last byte.
  void StartRow() {
    const WarmRows& w = t_.warm[range_];
    const std::uintptr_t begin =
        reinterpret_cast<std::uintptr_t>(w.first) +
        static_cast<std::uintptr_t>(head_ * w.head_stride + row_ * w.row_stride);
    const auto line_mask = ~static_cast<std::uintptr_t>(kWarmLineBytes - 1);
    line_ = reinterpret_cast<const std::byte*>(begin & line_mask);
    last_ = reinterpret_cast<const std::byte*>(begin + static_cast<std::uintptr_t>(w.bytes) - 1);
  }

  const AttendTile& t_;
  Request request_;
  std::int64_t per_step_ = 0;
  int range_ = 2;
  std::int64_t head_ = 0;
  std::int64_t row_ = 0;
  const std::byte* line_ = nullptr;
  const std::byte* last_ = nullptr;
};

}  // namespace
}  // namespace ringkv::kernels
