#pragma once
// The prompt cache file (docs/prompt_cache.md): safetensors layout, i.e. an
// 8-byte little-endian header length N, N bytes of JSON, then raw tensor bytes.
// The JSON maps each tensor name to {dtype, shape, data_offsets} and carries
// "__metadata__" (string values only, as safetensors requires): format, version,
// fingerprint, the JSON texts "model", "nodes" and "checksums", and
// "metadata_checksum" over those three texts.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prompt_state.h"

namespace ringkv::detail {

inline constexpr const char* kFileFormat = "ringkv.prompt_cache";
// 2: the K/V layout is stated per layer (version 1 had one, often wrong, for all).
inline constexpr int kFileVersion = 2;
// A header larger than this is rejected before parsing (a corrupt length field).
inline constexpr std::size_t kMaxHeaderBytes = std::size_t{64} << 20;

// XXH3_64bits over the three JSON texts (with their lengths), as 16 hex digits:
// token ids and offsets live in the header, outside the tensor checksums.
std::string MetadataChecksum(std::string_view model, std::string_view nodes,
                             std::string_view checksums);

// The file bytes for `nodes` (each node's parent must be the root or come earlier).
// Returns the header (length field and JSON) and fills `tensors` with the
// contiguous K/V in data order.
std::vector<std::byte> EncodeHeader(const PromptState& s, std::span<const PromptNode* const> nodes,
                                    std::vector<Tensor>& tensors);

// A validated trie built from a file, not yet installed.
struct LoadedTrie {
  Layouts layouts;  // the file's, per layer
  std::unique_ptr<PromptNode> root;
  HeldBlocks held;
  std::uint64_t clock = 0;
};
// Throws ringkv::SnapshotError "[PromptCache::Load] ..." on any problem.
LoadedTrie DecodeFile(const PromptState& s, std::span<const std::byte> file);

}  // namespace ringkv::detail
