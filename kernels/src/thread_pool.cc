// See thread_pool.h. Wake-up latency matters more than idle CPU here: a decode
// step calls Sdpa once per layer, a few hundred microseconds apart, so both the
// workers (waiting for a job) and the caller (waiting for the workers) spin for
// a short while before they block on a condition variable.
#include "ringkv/kernels/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "thread_start.h"

namespace ringkv::kernels {
namespace {

// How long a waiting thread spins before it sleeps: long enough to cover the gap
// between the layers of one decode step, short enough not to burn a shared core.
constexpr auto kSpinTime = std::chrono::microseconds(50);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpinTime passes; returns done().
template <class Done>
bool SpinUntil(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  while (!done()) {
    for (int i = 0; i < 64; ++i) CpuRelax();
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
  return true;
}

std::thread StartWithStdThread(std::function<void()> body) { return std::thread(std::move(body)); }

// The test seam of thread_start.h; only tests ever store another starter.
std::atomic<internal::ThreadStarter> thread_starter{StartWithStdThread};

}  // namespace

namespace internal {

std::thread StartThread(std::function<void()> body) {
  return thread_starter.load(std::memory_order_acquire)(std::move(body));
}

ScopedThreadStarter::ScopedThreadStarter(ThreadStarter starter) noexcept
    : previous_(thread_starter.exchange(starter, std::memory_order_acq_rel)) {}

ScopedThreadStarter::~ScopedThreadStarter() {
  thread_starter.store(previous_, std::memory_order_release);
}

}  // namespace internal

struct ThreadPool::Shared {
  void WorkerLoop(int worker);
  void Drain(int worker);
  void StopAndJoin() noexcept;

  std::vector<std::thread> workers;
  std::mutex run_mutex;  // serialises Run
  // Hand-over of one job: Run publishes job and tasks, then bumps generation
  // (release); a worker that sees a new generation (acquire) reads them, takes
  // tasks from next_task until they run out and then decrements active.
  std::mutex mutex;  // guards the sleeping side of generation / active
  std::condition_variable wake;
  std::condition_variable done;
  std::optional<TaskRef> job;
  std::size_t tasks = 0;
  std::atomic<std::size_t> next_task{0};
  std::atomic<std::uint64_t> generation{0};
  std::atomic<int> active{0};  // workers that have not finished the current job
  std::atomic<bool> stop{false};
};

ThreadPool::ThreadPool(int threads)
    : size_(threads > 0 ? threads
                        : static_cast<int>(std::thread::hardware_concurrency() > 0
                                               ? std::thread::hardware_concurrency()
                                               : 1)),
      shared_(std::make_unique<Shared>()) {
  try {
    shared_->workers.reserve(static_cast<std::size_t>(size_ - 1));
    for (int w = 1; w < size_; ++w) {
      shared_->workers.push_back(
          internal::StartThread([shared = shared_.get(), w] { shared->WorkerLoop(w); }));
    }
  } catch (...) {
    // A thread that cannot start (a process limit): the destructor will not
    // run, and a joinable std::thread left behind would terminate the process.
    shared_->StopAndJoin();
    throw;
  }
}

ThreadPool::~ThreadPool() { shared_->StopAndJoin(); }

void ThreadPool::Shared::StopAndJoin() noexcept {
  {
    const std::lock_guard lock(mutex);
    stop.store(true, std::memory_order_release);
  }
  wake.notify_all();
  for (std::thread& t : workers) t.join();
  workers.clear();
}

void ThreadPool::Run(std::size_t tasks, TaskRef fn) noexcept {
  if (tasks == 0) return;
  Shared& s = *shared_;
  const std::lock_guard run_lock(s.run_mutex);
  if (s.workers.empty() || tasks == 1) {
    for (std::size_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    const std::lock_guard lock(s.mutex);
    s.job = fn;
    s.tasks = tasks;
    s.next_task.store(0, std::memory_order_relaxed);
    s.active.store(static_cast<int>(s.workers.size()), std::memory_order_relaxed);
    s.generation.fetch_add(1, std::memory_order_release);
  }
  s.wake.notify_all();
  s.Drain(0);
  // Every worker must check in before fn (the caller's) may go out of scope.
  const auto all_done = [&s] { return s.active.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(all_done)) {
    std::unique_lock lock(s.mutex);
    s.done.wait(lock, all_done);
  }
  s.job.reset();
}

void ThreadPool::Shared::Drain(int worker) {
  for (;;) {
    const std::size_t task = next_task.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks) return;
    (*job)(task, worker);
  }
}

void ThreadPool::Shared::WorkerLoop(int worker) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto has_news = [this, &seen] {
      return generation.load(std::memory_order_acquire) != seen ||
             stop.load(std::memory_order_acquire);
    };
    if (!SpinUntil(has_news)) {
      std::unique_lock lock(mutex);
      wake.wait(lock, has_news);
    }
    if (stop.load(std::memory_order_acquire)) return;
    seen = generation.load(std::memory_order_acquire);
    Drain(worker);
    if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taking the lock orders this notify after the caller's predicate check.
      const std::lock_guard lock(mutex);
      done.notify_one();
    }
  }
}

}  // namespace ringkv::kernels
