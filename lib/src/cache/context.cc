#include "ringkv/context.h"

#include <fmt/format.h>

#include <new>
#include <system_error>

#include "ringkv/error.h"

namespace ringkv {
namespace {

const kernels::KernelTable* PickTable(std::optional<kernels::Isa> isa) {
  const kernels::TierCapSetting& cap = kernels::TierCap();
  if (!cap.valid) {
    throw Error(fmt::format("[Context] RINGKV_ISA '{}' names no tier (scalar, sse42, avx2, avx512)",
                            cap.value));
  }
  if (!isa.has_value()) return &kernels::BestKernels();
  if (*isa > cap.cap) {
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

}  // namespace

// The pool throws the standard library's errors (kernels/ knows nothing of
// ringkv::Error); they are translated here, with the thread count.
Context::Context(int threads, std::optional<kernels::Isa> isa) try
    : table_(PickTable(isa)), pool_(threads) {
} catch (const std::system_error& error) {
  throw Error(fmt::format("[Context] threads {}: a thread could not be started: {}", threads,
                          error.what()));
} catch (const std::bad_alloc&) {
  throw Error(fmt::format("[Context] threads {}: out of memory for the thread pool", threads));
}

}  // namespace ringkv
