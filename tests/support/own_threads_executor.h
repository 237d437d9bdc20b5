#pragma once
// A caller's executor for tests: each Run starts one thread per worker index
// (never the calling thread), hands out the tasks dynamically and counts what it
// ran, so a test can tell that ringkv's work really ran on the caller's threads.

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "ringkv/kernels/executor.h"

namespace ringkv::test {

template <int kWorkers>
class OwnThreadsExecutor final : public kernels::Executor {
 public:
  int Concurrency() const noexcept override { return kWorkers; }
  void Run(std::size_t tasks, kernels::TaskRef fn) noexcept override {
    ++runs;
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] {
        for (std::size_t t = next++; t < tasks; t = next++) {
          fn(t, w);
          ++tasks_run;
          if (std::this_thread::get_id() == caller) ++on_caller;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> runs{0};
  std::atomic<int> tasks_run{0};
  std::atomic<int> on_caller{0};  // tasks that ran on the thread that made the executor
};

}  // namespace ringkv::test
