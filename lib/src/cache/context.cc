#include "ringkv/context.h"

#include <fmt/format.h>

#include <mutex>
#include <new>
#include <system_error>

#include "context_access.h"
#include "ringkv/error.h"
#include "ringkv/kernels/thread_pool.h"

namespace ringkv {
namespace {

const kernels::KernelTable* PickTable(std::optional<kernels::Isa> isa) {
  const kernels::TierCapSetting& cap = kernels::TierCap();
  if (!cap.valid) {
    throw Error(fmt::format(
        "[Context] RINGKV_ISA '{}' names no tier (scalar, sse42, avx2, avx512, neon)", cap.value));
  }
  if (!isa.has_value()) return &kernels::BestKernels();
  if (!kernels::IsaWithinCap(*isa, cap.cap)) {
    throw Error(fmt::format("[Context] isa {} is above the tier cap {} set by RINGKV_ISA={}",
                            kernels::IsaKey(*isa), kernels::IsaKey(cap.cap), cap.value));
  }
  const kernels::KernelTable* table = kernels::KernelsFor(*isa);
  if (table == nullptr) {
    throw Error(fmt::format("[Context] isa {} is not compiled in or cannot run on this CPU",
                            kernels::IsaKey(*isa)));
  }
  return table;
}

constexpr std::align_val_t kArenaAlignment{64};

struct ArenaFree {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, kArenaAlignment); }
};

}  // namespace

struct Context::Impl {
  const kernels::KernelTable* table = nullptr;
  std::unique_ptr<kernels::ThreadPool> own_pool;  // null on a caller's executor
  kernels::Executor* executor = nullptr;
  std::mutex arena_mutex;                         // guards the arena during a call
  std::unique_ptr<std::byte[], ArenaFree> arena;  // [arena_bytes], 64-byte aligned
  std::size_t arena_bytes = 0;
};

// The pool throws the standard library's errors (kernels/ knows nothing of
// ringkv::Error); they are translated here, with the thread count.
Context::Context(int threads, std::optional<kernels::Isa> isa) try
    : impl_(std::make_unique<Impl>()) {
  impl_->table = PickTable(isa);
  impl_->own_pool = std::make_unique<kernels::ThreadPool>(threads);
  impl_->executor = impl_->own_pool.get();
} catch (const std::system_error& error) {
  throw Error(fmt::format("[Context] threads {}: a thread could not be started: {}", threads,
                          error.what()));
} catch (const std::bad_alloc&) {
  throw Error(fmt::format("[Context] threads {}: out of memory for the thread pool", threads));
}

Context::Context(kernels::Executor& executor, std::optional<kernels::Isa> isa) try
    : impl_(std::make_unique<Impl>()) {
  impl_->table = PickTable(isa);
  impl_->executor = &executor;
} catch (const std::bad_alloc&) {
  throw Error("[Context] out of memory for the context");
}

Context::~Context() = default;

kernels::Isa Context::Tier() const noexcept { return impl_->table->isa; }
int Context::Threads() const noexcept { return impl_->executor->Concurrency(); }
kernels::Executor& Context::GetExecutor() noexcept { return *impl_->executor; }

namespace detail {

const kernels::KernelTable& ContextAccess::Kernels(const Context& ctx) noexcept {
  return *ctx.impl_->table;
}

std::unique_lock<std::mutex> ContextAccess::Exclusive(Context& ctx) {
  return std::unique_lock<std::mutex>(ctx.impl_->arena_mutex);
}

std::span<std::byte> ContextAccess::Arena(const char* function, Context& ctx, std::size_t bytes) {
  Context::Impl& impl = *ctx.impl_;
  if (bytes > impl.arena_bytes) {
    // Rounded up to whole pages so that slowly growing calls do not reallocate every time.
    constexpr std::size_t kPage = 4096;
    const std::size_t rounded =
        bytes > SIZE_MAX - kPage ? bytes : (bytes + kPage - 1) / kPage * kPage;
    auto* fresh = static_cast<std::byte*>(::operator new[](rounded, kArenaAlignment, std::nothrow));
    if (fresh == nullptr) {
      throw Error(
          fmt::format("[{}] out of memory: the context's scratch arena needs {} bytes (has {})",
                      function, rounded, impl.arena_bytes));
    }
    impl.arena.reset(fresh);
    impl.arena_bytes = rounded;
  }
  return {impl.arena.get(), bytes};
}

std::size_t ContextAccess::ArenaBytes(const Context& ctx) noexcept {
  return ctx.impl_->arena_bytes;
}

}  // namespace detail
}  // namespace ringkv
