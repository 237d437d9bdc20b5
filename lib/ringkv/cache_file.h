#pragma once
// Saving a model's caches to a file and loading them back, without a prompt
// cache (mlx-lm's save_prompt_cache / load_prompt_cache):
//
//   ringkv::SaveCaches("chat.safetensors", caches, prompt, {{"model", "my-model-v3"}});
//   ringkv::SavedCaches saved = ringkv::LoadCaches("chat.safetensors");
//   // saved.caches continues decoding exactly where `caches` was.
//
// The file restores every layer exactly: its kind (KVCache or RotatingKVCache
// and its window), block size, K/V layout and dtype, offset and, for a ring, its
// slots and write cursor, so decoding on from the loaded caches gives the same
// results, bit for bit, as decoding on from the saved ones. It also holds the
// caller's tokens (any ints, any number) and string metadata. The format shares
// the prompt cache file's safetensors layout, checksums, atomic write and
// validation (docs/cache_file.md).

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ringkv/layer_caches.h"

namespace ringkv {

struct SavedCaches {
  LayerCaches caches;
  std::vector<int> tokens;
  std::map<std::string, std::string> metadata;
};

// Writes `caches` (every layer at one offset), `tokens` and `metadata` (keys and
// values valid UTF-8) to `path` atomically (a temporary file in the same
// directory, fsync, rename; the replaced file's mode is kept; on failure nothing
// is left). Throws ringkv::Error naming the problem: layers at different
// offsets, text that is not UTF-8, a header over the 16 MiB LoadCaches accepts,
// blocks far larger than the tokens they hold (docs/cache_file.md), or an I/O
// error. The caches are not changed.
void SaveCaches(const std::string& path, const LayerCaches& caches,
                std::span<const int> tokens = {},
                const std::map<std::string, std::string>& metadata = {});

// Reads a file SaveCaches wrote, after validating all of it. Throws
// ringkv::SnapshotError naming the problem for a file that is not a regular
// file, not a caches file (a prompt cache file included), truncated, corrupted
// or inconsistent. LoadCaches reads regular files only.
SavedCaches LoadCaches(const std::string& path);
SavedCaches LoadCachesFromMemory(std::span<const std::byte> file);

}  // namespace ringkv
