// libFuzzer target for LoadCachesFromMemory: any input must either load or throw
// ringkv::Error, never crash, leak or trip a sanitizer. Loaded caches are then
// used: every layer takes its own K/V again as one more chunk (the layout comes
// from the file), so restored rings and spans are read and written.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ringkv/cache_file.h"
#include "ringkv/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    ringkv::SavedCaches saved = ringkv::LoadCachesFromMemory(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size));
    for (std::size_t l = 0; l < saved.caches.Size(); ++l) {
      const ringkv::KvView state = saved.caches[l].State();
      if (state.Empty()) continue;
      saved.caches[l].Update(state.ConcatKeys(), state.ConcatValues());
    }
  } catch (const ringkv::Error&) {
  }
  return 0;
}
