#pragma once
// The test-name suffix of a tier-parameterised kernel suite: the tier's name with
// every character GoogleTest does not allow in a name turned into '_'
// ("avx2+fma+f16c" -> "avx2_fma_f16c").

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "ringkv/kernels/isa.h"

namespace ringkv::test {

inline std::string TierName(const ::testing::TestParamInfo<kernels::Isa>& info) {
  std::string name;
  for (char c : kernels::IsaName(info.param)) {
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  return name;
}

}  // namespace ringkv::test
