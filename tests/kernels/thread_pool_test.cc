#include "ringkv/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ringkv::kernels {
namespace {

// Runs `tasks` tasks and checks each ran exactly once with a valid worker id.
void ExpectEachTaskOnce(ThreadPool& pool, std::size_t tasks) {
  std::vector<std::atomic<int>> runs(tasks);
  std::atomic<bool> bad_worker{false};
  pool.Run(tasks, [&](std::size_t task, int worker) {
    runs[task].fetch_add(1);
    if (worker < 0 || worker >= pool.Size()) bad_worker = true;
  });
  for (std::size_t t = 0; t < tasks; ++t) ASSERT_EQ(runs[t].load(), 1) << "task " << t;
  EXPECT_FALSE(bad_worker.load());
}

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.Size(), 2);
  for (std::size_t tasks : {0u, 1u, 2u, 3u, 17u, 1000u}) ExpectEachTaskOnce(pool, tasks);
}

TEST(ThreadPoolTest, RepeatedRunsReuseTheWorkers) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int call = 0; call < 300; ++call) {
    pool.Run(8, [&](std::size_t task, int) { sum += static_cast<long>(task); });
  }
  EXPECT_EQ(sum.load(), 300L * 28L);
}

TEST(ThreadPoolTest, SizeOneRunsOnTheCaller) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.Size(), 1);
  std::vector<int> order;
  pool.Run(5, [&](std::size_t task, int worker) {
    EXPECT_EQ(worker, 0);
    order.push_back(static_cast<int>(task));
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(ThreadPoolTest, WorkersReallyRunInParallel) {
  // Both participants must be inside a task at the same time at least once
  // when each task waits for the other to arrive.
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  std::atomic<bool> met{false};
  pool.Run(2, [&](std::size_t, int) {
    arrived.fetch_add(1);
    for (long spin = 0; spin < 200'000'000 && !met.load(); ++spin) {
      if (arrived.load() == 2) met = true;
    }
  });
  EXPECT_TRUE(met.load());
}

}  // namespace
}  // namespace ringkv::kernels
