// ringkv_tier_run <tier> <command> [args...]
// Runs <command> with the process tier cap RINGKV_ISA=<tier> (scalar, sse42,
// avx2, avx512, neon), so that a whole suite runs on that tier. When this CPU cannot
// run <tier>, it runs nothing and instead checks that the tier is refused: not
// available from the kernels and an error from ringkv::Context. Exits 0 on
// success, the command's status when it runs, 1 when the refusal check fails and
// 2 on a usage error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "ringkv/context.h"
#include "ringkv/error.h"
#include "ringkv/kernels/isa.h"
#include "ringkv/kernels/kernel_table.h"

namespace {

using ringkv::kernels::Isa;

int CheckRefused(Isa tier, const std::string& key) {
  const Isa best = ringkv::kernels::BestKernels().isa;
  if (ringkv::kernels::KernelsFor(tier) != nullptr || best == tier) {
    std::fprintf(stderr, "ringkv_tier_run: %s is unavailable but was offered\n", key.c_str());
    return 1;
  }
  try {
    const ringkv::Context ctx(1, tier);
    std::fprintf(stderr, "ringkv_tier_run: Context(1, %s) did not throw\n", key.c_str());
    return 1;
  } catch (const ringkv::Error& error) {
    std::printf(
        "ringkv_tier_run: this CPU cannot run tier %s, so the suite is not run on it; checked "
        "that the tier is refused (%s) and that kernels fall back to %s\n",
        key.c_str(), error.what(), std::string(ringkv::kernels::IsaKey(best)).c_str());
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Isa> tier = argc >= 3 ? ringkv::kernels::IsaFromKey(argv[1]) : std::nullopt;
  if (!tier) {
    std::fprintf(stderr,
                 "usage: ringkv_tier_run scalar|sse42|avx2|avx512|neon <command> [args...]\n");
    return 2;
  }
  const std::string key = argv[1];
  // Before the first kernel call of this process, which reads the cap once; the
  // command inherits it.
  if (setenv("RINGKV_ISA", key.c_str(), 1) != 0) {
    std::perror("ringkv_tier_run: setenv");
    return 2;
  }
  if (ringkv::kernels::KernelsFor(*tier) == nullptr) return CheckRefused(*tier, key);
  std::printf("ringkv_tier_run: RINGKV_ISA=%s %s\n", key.c_str(), argv[2]);
  std::fflush(stdout);
  execvp(argv[2], argv + 2);
  std::perror("ringkv_tier_run: exec");
  return 127;
}
