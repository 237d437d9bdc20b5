#pragma once
// Where ringkv's parallel work runs. kernels::Sdpa (and a ringkv::Context) take an
// Executor, so an engine with its own thread pool runs ringkv's work on it;
// ThreadPool (thread_pool.h) is ringkv's own implementation.

#include <cstddef>
#include <memory>
#include <type_traits>

namespace ringkv::kernels {

// A non-owning reference to a callable void(std::size_t task, int worker): two
// words, so handing work to an executor allocates nothing (a std::function of a
// lambda capturing more than its small buffer allocates on every call). Valid
// while the callable is: pass it down, never store it past the call.
class TaskRef {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, TaskRef> &&
           std::is_invocable_r_v<void, F&, std::size_t, int>)
      // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): excluded by the constraint
      TaskRef(F&& fn)
  noexcept  // NOLINT(google-explicit-constructor): binds like a function_ref
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
        call_([](void* object, std::size_t task, int worker) {
          (*static_cast<std::remove_reference_t<F>*>(object))(task, worker);
        }) {}

  void operator()(std::size_t task, int worker) const { call_(object_, task, worker); }

 private:
  void* object_;
  void (*call_)(void* object, std::size_t task, int worker);
};

class Executor {
 public:
  virtual ~Executor() = default;

  // The most tasks that run at once; every worker index Run passes is in
  // [0, Concurrency()). At least 1, and fixed for the executor's lifetime:
  // callers size per-worker scratch by it.
  virtual int Concurrency() const noexcept = 0;

  // Runs fn(task, worker) once for every task in [0, tasks) and returns when all
  // have finished (their writes visible to the caller). Two tasks that run at the
  // same time get different worker indices (each index is one worker's scratch).
  // The calling thread may run tasks itself. fn does not throw, and Run must not
  // either: kernels::Sdpa is noexcept. An executor that several threads share
  // must accept concurrent Run calls (ThreadPool serialises them).
  virtual void Run(std::size_t tasks, TaskRef fn) noexcept = 0;

 protected:
  Executor() = default;
  Executor(const Executor&) = default;
  Executor& operator=(const Executor&) = default;
};

}  // namespace ringkv::kernels
