#pragma once
// The prompt cache file (docs/prompt_cache.md): the safetensors frame of
// file_frame.h. The JSON maps each tensor name to {dtype, shape, data_offsets}
// and carries "__metadata__" (string values only, as safetensors requires):
// format (kPromptCacheFormat), version, fingerprint, the JSON texts "model",
// "nodes" and "checksums", and "metadata_checksum" over those three texts.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "file_tensors.h"
#include "prompt_state.h"

namespace ringkv::detail {

// 2: the K/V layout is stated per layer (version 1 had one, often wrong, for all).
inline constexpr int kFileVersion = 2;
// The largest header Load parses, and Save writes: max(16 MiB, byte_budget / 16).
// A parsed header takes up to ~20 times its size (nlohmann's DOM of hostile
// JSON; ringkv's own headers take 5-8 times), so parsing stays in proportion
// to the budget. ringkv's headers take ~400 bytes per node and layer.
inline constexpr std::size_t kMinHeaderLimit = std::size_t{16} << 20;
std::size_t MaxHeaderBytes(std::size_t byte_budget) noexcept;

// XXH3_64bits over the three JSON texts (with their lengths), as 16 hex digits:
// token ids and offsets live in the header, outside the tensor checksums.
std::string MetadataChecksum(std::string_view model, std::string_view nodes,
                             std::string_view checksums);

// The file bytes for `nodes` (each node's parent must be the root or come earlier).
// Returns the header (length field and JSON) and fills `tensors` with the
// contiguous K/V in data order. Throws ringkv::Error "[function] ..." for a
// snapshot it cannot write (EncodeLayer).
std::vector<std::byte> EncodeHeader(const PromptState& s, std::span<const PromptNode* const> nodes,
                                    std::vector<TensorBytes>& tensors, const char* function);

class ByteSource;

// A validated trie built from a file, not yet installed: within the budget.
struct LoadedTrie {
  Layouts layouts;  // the file's, per layer
  std::unique_ptr<PromptNode> root;
  HeldBlocks held;
  std::uint64_t clock = 0;
};
// Throws ringkv::SnapshotError "[PromptCache::Load] ..." on any problem.
LoadedTrie DecodeFile(const PromptState& s, const ByteSource& file);

}  // namespace ringkv::detail
