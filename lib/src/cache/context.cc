#include "ringkv/context.h"

#include <fmt/format.h>

#include "ringkv/error.h"

namespace ringkv {
namespace {

const kernels::KernelTable* PickTable(std::optional<kernels::Isa> isa) {
  if (!isa.has_value()) return &kernels::BestKernels();
  const kernels::KernelTable* table = kernels::KernelsFor(*isa);
  if (table == nullptr) {
    throw Error(fmt::format("[Context] isa {} is not compiled in or cannot run on this CPU",
                            kernels::IsaName(*isa)));
  }
  return table;
}

}  // namespace

Context::Context(int threads, std::optional<kernels::Isa> isa)
    : pool_(threads), table_(PickTable(isa)) {}

}  // namespace ringkv
