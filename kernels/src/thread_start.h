#pragma once
// Test seam: how ThreadPool starts its worker threads. Production code never
// replaces the starter. Tests do, to make the k-th start fail as a process limit
// would (root ignores RLIMIT_NPROC, so a real limit cannot be provoked in CI).
#include <functional>
#include <thread>

namespace ringkv::kernels::internal {

// Starts `body` on a new thread, or throws std::system_error like std::thread.
using ThreadStarter = std::thread (*)(std::function<void()> body);

// Starts a worker through the current starter (std::thread by default).
std::thread StartThread(std::function<void()> body);

// Installs `starter` for its lifetime. Not for use while another thread may be
// constructing a ThreadPool.
class ScopedThreadStarter {
 public:
  explicit ScopedThreadStarter(ThreadStarter starter) noexcept;
  ~ScopedThreadStarter();
  ScopedThreadStarter(const ScopedThreadStarter&) = delete;
  ScopedThreadStarter& operator=(const ScopedThreadStarter&) = delete;

 private:
  ThreadStarter previous_;
};

}  // namespace ringkv::kernels::internal
