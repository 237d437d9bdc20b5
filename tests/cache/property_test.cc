// Random sequences of Update (L = 1 and L > 1), Snapshot, Restore and rewind,
// checked after every step against a plain model: the list of every token
// appended (by unique id), truncated on rewind. A cache's logical contents must
// equal the model's last window.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "cache_test_util.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"

namespace ringkv {
namespace {

using test::Positions;
using test::Tokens;

std::vector<int> Tail(const std::vector<int>& model, std::size_t keep) {
  keep = std::min(keep, model.size());
  return std::vector<int>(model.end() - static_cast<std::ptrdiff_t>(keep), model.end());
}

int Pick(std::mt19937& rng, int n) {
  return static_cast<int>(rng() % static_cast<std::uint32_t>(n));
}

struct Saved {
  std::unique_ptr<Snapshot> snapshot;
  std::vector<int> model;    // the model when the snapshot was taken
  bool after_decode = true;  // whether the ring held exactly the window then
};

TEST(CacheProperty, RotatingMatchesTheModel) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 40; ++round) {
    const int max_size = 1 + Pick(rng, 9);
    const int block = 1 + Pick(rng, 5);
    RotatingKVCache cache(max_size, block);
    std::vector<int> model;
    std::vector<Saved> saved;
    int next_id = 0;
    bool last_was_decode = false;
    for (int step = 0; step < 60; ++step) {
      const int op = Pick(rng, 10);
      SCOPED_TRACE(testing::Message() << "round " << round << " step " << step << " op " << op
                                      << " max " << max_size << " offset " << cache.Offset());
      if (op < 5) {  // decode
        const auto [k, v] = Tokens(next_id, 1);
        cache.Update(k, v);
        model.push_back(next_id++);
        last_was_decode = true;
      } else if (op < 7) {  // prefill
        const int length = 2 + Pick(rng, 2 * max_size + 1);
        const auto [k, v] = Tokens(next_id, length);
        const int kept = std::min(cache.Offset(), max_size - 1);
        const KVHistory history = cache.Update(k, v);
        for (int i = 0; i < length; ++i) model.push_back(next_id++);
        // The concat path: the last max_size - 1 old tokens, then all new ones.
        EXPECT_EQ(Positions(history.Kv()), Tail(model, static_cast<std::size_t>(kept + length)));
        last_was_decode = false;
      } else if (op < 8) {  // snapshot
        if (cache.Offset() > 0) {
          const int from = Pick(rng, cache.Offset());
          saved.push_back({cache.Snapshot(from), model, last_was_decode});
          ASSERT_NE(saved.back().snapshot, nullptr);
        }
      } else if (op < 9) {  // restore from a snapshot
        if (saved.empty()) continue;
        const Saved& s = saved[static_cast<std::size_t>(Pick(rng, static_cast<int>(saved.size())))];
        const int to = s.snapshot->ToOffset();
        const int target = Pick(rng, to + 2);
        const bool expected = target <= to && !(target < to && to > max_size);
        const int offset_before = cache.Offset();
        ASSERT_EQ(cache.Restore(s.snapshot.get(), target), expected);
        if (expected) {
          model = s.model;
          model.resize(static_cast<std::size_t>(target));
          // A full restore brings back the ring as it was; a clamped one (only
          // while the window has not moved) leaves it in order.
          last_was_decode = target < to || s.after_decode;
        } else {
          ASSERT_EQ(cache.Offset(), offset_before);
        }
      } else {  // live rewind
        const int target = Pick(rng, cache.Offset() + 2);
        const int offset = cache.Offset();
        const bool expected = target == offset || (target < offset && offset <= max_size);
        ASSERT_EQ(cache.Restore(nullptr, target), expected);
        if (expected) model.resize(static_cast<std::size_t>(target));
      }
      ASSERT_EQ(cache.Offset(), static_cast<int>(model.size()));
      EXPECT_EQ(Positions(cache.View().Kv()), Tail(model, static_cast<std::size_t>(max_size - 1)));
      if (last_was_decode) {
        // The live slots, read from the cursor, are the last min(offset, max) tokens.
        const std::vector<int> state = Positions(cache.State());
        const auto live = std::min(model.size(), static_cast<std::size_t>(max_size));
        if (cache.Offset() >= max_size) {
          ASSERT_EQ(state.size(), live);
          std::vector<int> logical;
          for (std::size_t j = 0; j < live; ++j) {
            logical.push_back(state[(static_cast<std::size_t>(cache.RingIndex()) + j) % live]);
          }
          EXPECT_EQ(logical, Tail(model, live));
        } else {
          EXPECT_EQ(state, model);
        }
      }
    }
  }
}

TEST(CacheProperty, KVCacheMatchesTheModel) {
  std::mt19937 rng(777);
  for (int round = 0; round < 30; ++round) {
    const int block = 1 + Pick(rng, 6);
    KVCache cache(block);
    std::vector<int> model;
    std::vector<Saved> saved;
    int next_id = 0;
    for (int step = 0; step < 60; ++step) {
      const int op = Pick(rng, 10);
      SCOPED_TRACE(testing::Message() << "round " << round << " step " << step << " op " << op);
      if (op < 6) {
        const int length = op < 4 ? 1 : 2 + Pick(rng, 7);
        const auto [k, v] = Tokens(next_id, length);
        cache.Update(k, v);
        for (int i = 0; i < length; ++i) model.push_back(next_id++);
      } else if (op < 7) {
        if (cache.Offset() > 0) {
          const int from = Pick(rng, cache.Offset());
          saved.push_back({cache.Snapshot(from), model});
        }
      } else if (op < 8) {
        if (saved.size() >= 2) {  // merge two adjacent ones when they are adjacent
          auto& a = saved[static_cast<std::size_t>(Pick(rng, static_cast<int>(saved.size())))];
          auto& b = saved[static_cast<std::size_t>(Pick(rng, static_cast<int>(saved.size())))];
          if (&a != &b && a.snapshot->ToOffset() == b.snapshot->FromOffset() &&
              std::equal(a.model.begin(), a.model.end(), b.model.begin())) {
            const int from = a.snapshot->FromOffset();
            const int to = b.snapshot->ToOffset();
            auto merged = cache.Merge(std::move(a.snapshot), std::move(b.snapshot));
            ASSERT_EQ(merged->FromOffset(), from);
            ASSERT_EQ(merged->ToOffset(), to);
            std::vector<int> model_b = b.model;
            a.snapshot = std::move(merged);
            a.model = model_b;
            b.snapshot = cache.Snapshot(0);
            b.model = model;
            if (b.snapshot == nullptr) saved.erase(saved.begin() + (&b - saved.data()));
          }
        }
      } else if (op < 9) {
        if (saved.empty()) continue;
        const Saved& s = saved[static_cast<std::size_t>(Pick(rng, static_cast<int>(saved.size())))];
        const int target = Pick(rng, s.snapshot->ToOffset() + 2);
        const bool expected =
            target <= s.snapshot->ToOffset() && cache.Offset() >= s.snapshot->FromOffset();
        // The model after a restore: our tokens before the snapshot's start, then its own.
        std::vector<int> restored(
            model.begin(),
            model.begin() + std::min<std::ptrdiff_t>(s.snapshot->FromOffset(),
                                                     static_cast<std::ptrdiff_t>(model.size())));
        for (int i = s.snapshot->FromOffset(); i < s.snapshot->ToOffset(); ++i) {
          restored.push_back(s.model[static_cast<std::size_t>(i)]);
        }
        ASSERT_EQ(cache.Restore(s.snapshot.get(), target), expected);
        if (expected) {
          restored.resize(static_cast<std::size_t>(target));
          model = restored;
        }
      } else {
        const int target = Pick(rng, cache.Offset() + 2);
        const bool expected = target <= cache.Offset();
        ASSERT_EQ(cache.Restore(nullptr, target), expected);
        if (expected) model.resize(static_cast<std::size_t>(target));
      }
      ASSERT_EQ(Positions(cache.State()), model);
      // Memory stays within one block of what is live.
      EXPECT_LE(cache.AllocatedBytes(),
                static_cast<std::size_t>((cache.Offset() + block - 1) / block * block) * 2u *
                    (8u + 4u) * 4u);
    }
  }
}

}  // namespace
}  // namespace ringkv
