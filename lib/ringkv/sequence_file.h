#pragma once
// Saving one sequence of a pool to a file and loading it back into any
// sequence id of a compatible pool (a server parking a slot on disk):
//
//   CausalCache* caches[] = {&sliding, &global};
//   ringkv::SaveSequence("slot3.safetensors", caches, 3, tokens, {{"model", "my-model-v3"}});
//   ringkv::SavedSequence s = ringkv::LoadSequence("slot3.safetensors", caches, 5);
//   // sequence 5 now continues exactly where sequence 3 was.
//
// The file holds, per cache of the model, the sequence's stored positions and
// the K/V of every layer at them (the sequence's snapshot), plus the caller's
// tokens and string metadata. Loading checks the pool's layout against the
// file (layers, kv heads, key and value dims, dtype, window, chunk) and writes
// the K/V into blocks allocated from the pool: nothing is shared with the file.
// The format ("ringkv.sequence" version 1) shares the prompt cache file's
// safetensors frame, checksums, limits and atomic write (docs/prompt_cache.md).

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ringkv/causal_cache.h"

namespace ringkv {

struct SavedSequence {
  std::vector<int> tokens;
  std::map<std::string, std::string> metadata;
  Position next_position = 0;  // one past the last stored position
};

// Writes sequence `seq` of every cache (each holding at least one of its
// tokens, all ending at one position), `tokens` and `metadata` (keys and values
// valid UTF-8) to `path` atomically (temporary file, fsync, rename). Throws
// ringkv::Error naming the problem, with nothing written; the caches are not
// changed.
void SaveSequence(const std::string& path, std::span<const CausalCache* const> caches,
                  SequenceId seq, std::span<const int> tokens = {},
                  const std::map<std::string, std::string>& metadata = {});

// Validates the whole file (ringkv::SnapshotError naming the problem for a
// file that is not a regular file, not a sequence file, truncated, corrupted,
// or of another layout than the caches), then makes `dst` hold exactly the
// saved tokens in every cache (whatever it held is dropped). Call it between
// forward passes: it runs its own passes to store the K/V. A pool that cannot
// hold them throws ringkv::Error ("cache full", naming the capacity and the
// request) with every cache exactly as it was.
SavedSequence LoadSequence(const std::string& path, std::span<CausalCache* const> caches,
                           SequenceId dst);
SavedSequence LoadSequenceFromMemory(std::span<const std::byte> file,
                                     std::span<CausalCache* const> caches, SequenceId dst);

}  // namespace ringkv
