#pragma once
// The library's access to a Context's internals: the kernel table and the
// scratch arena. Private to lib/ (and its tests).

#include <cstddef>
#include <span>

#include "ringkv/context.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv::detail {

struct ContextAccess {
  static const kernels::KernelTable& Kernels(const Context& ctx) noexcept;
  static kernels::Executor& Executor(Context& ctx) noexcept { return ctx.GetExecutor(); }
  // At least `bytes` of 64-byte aligned scratch, valid until the next call on
  // this Context. Grows the arena when it is too small (the old contents are not
  // kept); throws ringkv::Error naming `function` and the bytes when that fails,
  // with the arena as it was.
  static std::span<std::byte> Arena(const char* function, Context& ctx, std::size_t bytes);
  static std::size_t ArenaBytes(const Context& ctx) noexcept;
};

}  // namespace ringkv::detail
