#include "ringkv/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

#include "thread_start.h"

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

TEST(ThreadPoolTest, RunsFromSeveralThreadsAreSerialisedAndEachCompletes) {
  ThreadPool pool(2);
  constexpr int kCallers = 3;
  std::vector<std::thread> callers;
  std::vector<int> bad(kCallers, 0);
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&pool, &bad, c] {
      for (int round = 0; round < 50; ++round) {
        std::vector<int> runs(37, 0);  // plain ints: Run must order the writes before it returns
        pool.Run(runs.size(), [&](std::size_t task, int) { ++runs[task]; });
        for (int r : runs) bad[static_cast<std::size_t>(c)] += r == 1 ? 0 : 1;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(bad[static_cast<std::size_t>(c)], 0) << c;
}

// A starter that fails at start number `fail_at` (1-based) as a process limit
// would, and counts the workers it did start that have finished.
std::atomic<int> fail_at{0};
std::atomic<int> starts{0};
std::atomic<int> finished{0};

std::thread FailingStarter(std::function<void()> body) {
  if (starts.fetch_add(1) + 1 == fail_at.load()) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "test thread limit");
  }
  return std::thread([body = std::move(body)] {
    body();
    finished.fetch_add(1);
  });
}

TEST(ThreadPoolTest, AFailedThreadStartJoinsTheStartedWorkersAndThrows) {
  const internal::ScopedThreadStarter limit(FailingStarter);
  for (int k = 1; k <= 3; ++k) {  // a pool of 4 starts 3 workers
    fail_at = k;
    starts = 0;
    finished = 0;
    try {
      const ThreadPool pool(4);
      ADD_FAILURE() << "no exception when start " << k << " fails";
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code(), std::errc::resource_unavailable_try_again);
    }
    EXPECT_EQ(starts.load(), k);
    // Every worker that was started has returned: it was stopped and joined.
    EXPECT_EQ(finished.load(), k - 1) << "start " << k << " failed";
  }
}

TEST(ThreadPoolTest, WorksAgainOnceThreadsCanStart) {
  {
    const internal::ScopedThreadStarter limit(FailingStarter);
    fail_at = 1;
    starts = 0;
    EXPECT_THROW(ThreadPool(2), std::system_error);
  }
  ThreadPool pool(3);  // the default starter is back
  ExpectEachTaskOnce(pool, 100);
}

}  // namespace
}  // namespace ringkv::kernels
