#pragma once
// The explicit execution context: a thread pool and the kernel table to run on.
// There are no globals: every attention call takes a Context.

#include <optional>

#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/kernels/thread_pool.h"

namespace ringkv {

class Context {
 public:
  // threads <= 0 means one per hardware thread. Without `isa` the best tier for
  // this CPU within the process's tier cap (RINGKV_ISA, kernels::TierCap()) is
  // used. Throws ringkv::Error, before starting any thread, when `isa` is not
  // compiled in, cannot run on this CPU or is above the tier cap, or when
  // RINGKV_ISA names no tier; and when the threads cannot be started (e.g. a
  // process limit), after joining those that did start.
  explicit Context(int threads = 1, std::optional<kernels::Isa> isa = std::nullopt);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  kernels::ThreadPool& Pool() noexcept { return pool_; }
  const kernels::KernelTable& Kernels() const noexcept { return *table_; }

 private:
  const kernels::KernelTable* table_;  // first: validated before any thread starts
  kernels::ThreadPool pool_;
};

}  // namespace ringkv
