// A user of the installed package: builds a tensor and runs attention through
// the kernel table, using only the installed headers.
#include <cstdio>

#include "ringkv/format.h"
#include "ringkv/kernels/kernel_table.h"
#include "ringkv/tensor.h"

int main() {
  const ringkv::Tensor t = ringkv::Tensor::Zeros(ringkv::DType::kF16, {1, 2, 3, 4});
  const auto& table = ringkv::kernels::BestKernels();
  std::printf("%s on %s\nringkv consumer ok\n", fmt::format("{}", t).c_str(),
              std::string(ringkv::kernels::IsaName(table.isa)).c_str());
  return t.NumElements() == 24 ? 0 : 1;
}
