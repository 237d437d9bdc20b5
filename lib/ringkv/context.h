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
  // this CPU is used; an isa that is not compiled in or cannot run here throws
  // ringkv::Error.
  explicit Context(int threads = 1, std::optional<kernels::Isa> isa = std::nullopt);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  kernels::ThreadPool& Pool() noexcept { return pool_; }
  const kernels::KernelTable& Kernels() const noexcept { return *table_; }

 private:
  kernels::ThreadPool pool_;
  const kernels::KernelTable* table_;
};

}  // namespace ringkv
