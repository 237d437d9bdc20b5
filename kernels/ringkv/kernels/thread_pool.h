#pragma once
// ringkv's own Executor: a fixed set of worker threads created once and reused by
// every parallel call, so a decode step pays no thread creation. The calling
// thread takes part in the work, so a pool of size 1 has no workers at all.

#include <cstddef>
#include <memory>

#include "ringkv/kernels/executor.h"

namespace ringkv::kernels {

class ThreadPool final : public Executor {
 public:
  // `threads` <= 0 means std::thread::hardware_concurrency(). Throws
  // std::system_error when a worker thread cannot be started (e.g. a process
  // limit), after stopping and joining the workers it did start.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int Size() const noexcept { return size_; }
  int Concurrency() const noexcept override { return size_; }

  // Runs fn(task, worker) for task in [0, tasks), worker in [0, Size()), and
  // returns when all are done. Tasks are handed out dynamically. Calls from
  // several threads at once are serialised, so threads may share one pool.
  void Run(std::size_t tasks, TaskRef fn) noexcept override;

 private:
  struct Shared;  // the workers and their hand-over state (thread_pool.cc)
  int size_;
  std::unique_ptr<Shared> shared_;
};

}  // namespace ringkv::kernels
