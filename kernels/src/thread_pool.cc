// See thread_pool.h. Wake-up latency matters more than idle CPU here: a decode
// step calls Sdpa once per layer, a few hundred microseconds apart, so both the
// workers (waiting for a job) and the caller (waiting for the workers) spin for
// a short while before they block on a condition variable.
#include "ringkv/kernels/thread_pool.h"

#include <atomic>
#include <chrono>
#include <utility>

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

ThreadPool::ThreadPool(int threads)
    : size_(threads > 0 ? threads
                        : static_cast<int>(std::thread::hardware_concurrency() > 0
                                               ? std::thread::hardware_concurrency()
                                               : 1)) {
  try {
    workers_.reserve(static_cast<std::size_t>(size_ - 1));
    for (int w = 1; w < size_; ++w) {
      workers_.push_back(internal::StartThread([this, w] { WorkerLoop(w); }));
    }
  } catch (...) {
    // A thread that cannot start (a process limit): the destructor will not
    // run, and a joinable std::thread left behind would terminate the process.
    StopAndJoin();
    throw;
  }
}

ThreadPool::~ThreadPool() { StopAndJoin(); }

void ThreadPool::StopAndJoin() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::Run(std::size_t tasks,
                     const std::function<void(std::size_t task, int worker)>& fn) {
  if (tasks == 0) return;
  const std::lock_guard run_lock(run_mutex_);
  if (workers_.empty() || tasks == 1) {
    for (std::size_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    job_ = &fn;
    tasks_ = tasks;
    next_task_.store(0, std::memory_order_relaxed);
    active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  Drain(0);
  // Every worker must check in before fn (the caller's) may go out of scope.
  const auto all_done = [this] { return active_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(all_done)) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, all_done);
  }
  job_ = nullptr;
}

void ThreadPool::Drain(int worker) {
  for (;;) {
    const std::size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= tasks_) return;
    (*job_)(task, worker);
  }
}

void ThreadPool::WorkerLoop(int worker) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto has_news = [this, &seen] {
      return generation_.load(std::memory_order_acquire) != seen ||
             stop_.load(std::memory_order_acquire);
    };
    if (!SpinUntil(has_news)) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, has_news);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    Drain(worker);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taking the lock orders this notify after the caller's predicate check.
      const std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace ringkv::kernels
