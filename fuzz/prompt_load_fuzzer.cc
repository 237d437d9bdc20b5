// libFuzzer target for PromptCache::LoadFromMemory: any input must either load
// or throw ringkv::Error, never crash, leak or trip a sanitizer. A loaded trie is
// then used (a lookup per node), so imported snapshots are restored too.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_model.h"
#include "ringkv/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ringkv::LayerCaches caches = ringkv::fuzz::FuzzCaches();
  ringkv::fuzz::Feed(caches, std::vector<int>{0});  // the caches' K/V layout is known
  ringkv::PromptCache cache(caches, ringkv::fuzz::FuzzOptions());
  try {
    cache.LoadFromMemory(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size));
  } catch (const ringkv::Error&) {
    return 0;
  }
  const std::vector<ringkv::PromptNodeInfo> nodes = cache.Nodes();
  std::vector<std::vector<int>> paths(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].parent >= 0) paths[i] = paths[static_cast<std::size_t>(nodes[i].parent)];
    paths[i].insert(paths[i].end(), nodes[i].tokens.begin(), nodes[i].tokens.end());
    std::vector<int> request = paths[i];
    request.push_back(0);
    const ringkv::PrefixMatch match = cache.Lookup(request);
    // Continue from the restored state: the caches must accept new tokens.
    cache.Prefill(request, match,
                  [&](std::span<const int> chunk) { ringkv::fuzz::Feed(caches, chunk); });
    cache.Commit(request);
  }
  return 0;
}
