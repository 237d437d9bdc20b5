#pragma once
// Block sizes and work-split thresholds of the SDPA driver, in one place.
// Measured on the 2-core Zen 3 host (Hq 32, Hkv 8, D 128; a shared machine, so
// differences under ~10% were noise): key_block x tile_rows in {16, 32, 64} x
// {32, 64, 128}: 64 x 64 was best or equal for decode f16 T 1024 (~275 us, 1
// thread) and causal prefill f16 L 512 (T 512 and 4096). tasks_per_thread and
// min_chunk_keys are not tuned yet: they only matter for B * Hkv < 4 * threads.
// Re-measured for decode after the 4 x 3 score tiles (in-process min over 300
// calls, f16, 1 thread): key_block 32 / 64 / 128 / 256 -> T 1024 in cache 263 /
// 249 / 247 / 245 us, T 16k cold (2 layers cycled) 6.1-6.2 / 5.6-5.7 / 5.5-5.7 /
// 5.6-6.0 ms. 64 stays: larger blocks gain < 2% in decode and grow the score
// tile of prefill (64 rows x key_block floats) past half the L1.
// decode_key_block: docs/attention_tuning.md ("Decode key block") has the sweep.

#include <cstdint>

namespace ringkv::kernels {

struct SdpaTuning {
  // Keys per inner block of the attend kernels: the scores of a block for every
  // row of a tile live in L1 (rows x key_block floats). Multiple of 16.
  std::int64_t key_block = 64;
  // ... except for tiles of at most decode_tile_rows rows (decode, short
  // speculative steps), whose scores stay small: a longer block spreads the
  // per-block softmax work (reductions, the rescale) over more keys.
  std::int64_t decode_key_block = 256;
  std::int64_t decode_tile_rows = 16;
  // Query rows per tile (G heads x Lt rows): every K/V block is read once per tile,
  // so larger tiles cut K/V traffic in prefill; 64 rows x 64 keys of scores = 16 KiB.
  std::int64_t tile_rows = 64;
  // Split the key axis into chunks (flash-decoding) while there are fewer than
  // tasks_per_thread x threads tasks, so every thread has work and the dynamic
  // hand-out can balance uneven tasks.
  std::int64_t tasks_per_thread = 4;
  // ... but never make a chunk shorter than this many keys: each chunk costs a
  // partial state (rows x Dv) and a merge.
  std::int64_t min_chunk_keys = 512;
};

}  // namespace ringkv::kernels
