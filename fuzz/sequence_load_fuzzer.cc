// libFuzzer target for LoadSequenceFromMemory: any input must either load or
// throw ringkv::Error, never crash, leak or trip a sanitizer, and a refused
// input leaves the pool as it was. A pool of two caches (a sliding window and a
// global one, f32, 2 kv heads, dims 8/4) receives it; a loaded sequence then
// takes one more token, so the stored K/V are read and written.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "fuzz_model.h"
#include "ringkv/error.h"
#include "ringkv/sequence_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ringkv::CausalCache sliding(ringkv::fuzz::FuzzSequenceOptions(2, 8));
  ringkv::CausalCache global(ringkv::fuzz::FuzzSequenceOptions(1, 0));
  ringkv::CausalCache* caches[] = {&sliding, &global};
  ringkv::Position next[] = {0};
  try {
    next[0] =
        ringkv::LoadSequenceFromMemory(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), caches, 1)
            .next_position;
  } catch (const ringkv::Error&) {
    if (sliding.UsedBlocks() + global.UsedBlocks() != 0) std::abort();  // not rolled back
    return 0;
  }
  const ringkv::SequenceId seq[] = {1};
  try {
    for (ringkv::CausalCache* cache : caches) {
      cache->StartForward(ringkv::Batch{next, seq});
      for (int l = 0; l < cache->Options().layers; ++l) {
        cache->Update(l, ringkv::Tensor::Zeros(ringkv::DType::kF32, {1, 2, 1, 8}),
                      ringkv::Tensor::Zeros(ringkv::DType::kF32, {1, 2, 1, 4}));
      }
    }
  } catch (const ringkv::Error&) {
  }
  return 0;
}
