#pragma once
// The library's access to a Context's internals: the kernel table and the
// scratch arena. Private to lib/ (and its tests).

#include <cstddef>
#include <mutex>
#include <span>

#include "ringkv/context.h"
#include "ringkv/kernels/kernel_table.h"

namespace ringkv::detail {

struct ContextAccess {
  static const kernels::KernelTable& Kernels(const Context& ctx) noexcept;
  static kernels::Executor& Executor(Context& ctx) noexcept { return ctx.GetExecutor(); }
  // Held by a call for as long as it uses the arena: calls on one Context from
  // several threads take turns instead of sharing the scratch.
  static std::unique_lock<std::mutex> Exclusive(Context& ctx);
  // At least `bytes` of 64-byte aligned scratch, valid until the next call on
  // this Context; the caller holds Exclusive(ctx). Grows the arena when it is too small (the old
  // contents are not kept); throws ringkv::Error naming `function` and the bytes when that fails,
  // with the arena as it was.
  static std::span<std::byte> Arena(const char* function, Context& ctx, std::size_t bytes);
  static std::size_t ArenaBytes(const Context& ctx) noexcept;
};

}  // namespace ringkv::detail
