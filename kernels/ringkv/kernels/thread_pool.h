#pragma once
// A fixed set of worker threads created once and reused by every parallel call,
// so a decode step pays no thread creation. The calling thread takes part in the
// work, so a pool of size 1 has no workers at all.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ringkv::kernels {

class ThreadPool {
 public:
  // `threads` <= 0 means std::thread::hardware_concurrency(). Throws
  // std::system_error when a worker thread cannot be started (e.g. a process
  // limit), after stopping and joining the workers it did start.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int Size() const noexcept { return size_; }

  // Runs fn(task, worker) for task in [0, tasks), worker in [0, Size()), and
  // returns when all are done. Tasks are handed out dynamically. Calls from
  // several threads at once are serialised. fn must not throw.
  void Run(std::size_t tasks, const std::function<void(std::size_t task, int worker)>& fn);

 private:
  void WorkerLoop(int worker);
  void Drain(int worker);
  void StopAndJoin() noexcept;

  int size_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // serialises Run
  // Hand-over of one job: Run publishes job_ and tasks_, then bumps generation_
  // (release); a worker that sees a new generation (acquire) reads them, takes
  // tasks from next_task_ until they run out and then decrements active_.
  std::mutex mutex_;  // guards the sleeping side of generation_ / active_
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t, int)>* job_ = nullptr;
  std::size_t tasks_ = 0;
  std::atomic<std::size_t> next_task_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> active_{0};  // workers that have not finished the current job
  std::atomic<bool> stop_{false};
};

}  // namespace ringkv::kernels
