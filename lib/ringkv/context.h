#pragma once
// The explicit execution context of attention: the executor its parallel work
// runs on, the kernel tier, and a scratch arena that grows to the largest call
// and is then reused, so a call in steady state allocates nothing. There are no
// globals: every attention call takes a Context.
//
// Threads (docs/embedding.md, "Threads and executors"): give each thread its own
// Context. Calls on one Context from several threads are safe but take turns
// (they share its arena). Different threads may run attention at the same time
// with different Contexts, on different caches (or on forks and snapshots of one
// cache: they share blocks copy-on-write, safely). Several Contexts may share
// one executor when it accepts concurrent Run calls, as ThreadPool does.

#include <memory>
#include <optional>

#include "ringkv/kernels/executor.h"
#include "ringkv/kernels/isa.h"

namespace ringkv {

namespace detail {
struct ContextAccess;  // the library's access to the internals (lib/src/cache/context_access.h)
}  // namespace detail

class Context {
 public:
  // Runs on a pool of its own. threads <= 0 means one per hardware thread.
  // Without `isa` the best tier for this CPU within the process's tier cap
  // (RINGKV_ISA, kernels::TierCap()) is used. Throws ringkv::Error, before
  // starting any thread, when `isa` is not compiled in, cannot run on this CPU or
  // is above the tier cap, or when RINGKV_ISA names no tier; and when the threads
  // cannot be started (e.g. a process limit), after joining those that did start.
  explicit Context(int threads = 1, std::optional<kernels::Isa> isa = std::nullopt);
  // Runs on the caller's executor, which it does not own: the executor must
  // outlive the Context. Throws ringkv::Error for `isa` as above.
  explicit Context(kernels::Executor& executor, std::optional<kernels::Isa> isa = std::nullopt);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  kernels::Isa Tier() const noexcept;  // the tier attention runs
  int Threads() const noexcept;        // the executor's Concurrency()
  // The executor (the Context's own pool or the caller's); a model may run its
  // own parallel work on it too.
  kernels::Executor& GetExecutor() noexcept;

 private:
  friend struct detail::ContextAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringkv
