// Writes the seed corpus of the loader fuzzer: small valid prompt cache files for
// the fuzz model (fuzz_model.h). Usage: ringkv_prompt_fuzz_seeds <directory>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_model.h"

namespace {

// Serves `tokens` the way a decode loop does: lookup, chunked prefill, commit.
void Serve(ringkv::PromptCache& cache, ringkv::LayerCaches& caches,
           const std::vector<int>& tokens) {
  const ringkv::PrefixMatch match = cache.Lookup(tokens);
  cache.Prefill(tokens, match,
                [&](std::span<const int> chunk) { ringkv::fuzz::Feed(caches, chunk); });
  cache.Commit(tokens);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <directory>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  ringkv::LayerCaches caches = ringkv::fuzz::FuzzCaches();
  ringkv::PromptCache cache(caches, ringkv::fuzz::FuzzOptions());
  // One short entry inside the window (an unwrapped ring).
  Serve(cache, caches, {1, 2, 3});
  cache.Save(dir + "/short.safetensors");
  // A pinned prefix, a branch past the window, a repeat (a one-token node).
  cache.Pin(std::vector<int>{1, 2, 3});
  Serve(cache, caches, {1, 2, 3, 4, 5, 6, 7});
  Serve(cache, caches, {1, 2, 3, 9, 8});
  Serve(cache, caches, {1, 2, 3, 9, 8});
  cache.Save(dir + "/branches.safetensors");
  cache.SaveEntry(dir + "/entry.safetensors", std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  std::printf("seeds written to %s\n", dir.c_str());
  return 0;
}
