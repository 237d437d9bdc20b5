#pragma once
// The caches file (SaveCaches / LoadCaches, docs/cache_file.md): the safetensors
// frame of file_frame.h with "__metadata__" holding
//   format "ringkv.caches", version, the JSON texts "caches" (offset; per layer
//   kind, window, block_tokens, kv layout and state), "tokens" and "checksums",
//   the caller's metadata as "user.<key>", and "metadata_checksum" over all of
//   those entries.

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "json_fields.h"

namespace ringkv::detail {

inline constexpr int kCachesVersion = 1;
// The caller's metadata keys get this prefix, so they never meet ringkv's keys.
inline constexpr std::string_view kUserPrefix = "user.";
// The largest header LoadCaches parses and SaveCaches writes (a parsed header
// takes up to ~20 times its size, see prompt_file.h).
inline constexpr std::size_t kCachesHeaderLimit = std::size_t{16} << 20;
// A block holds block_tokens rows whatever the tokens in it, so a file could ask
// for huge blocks around a few tokens. Restored caches may take at most this
// much beyond their tokens' bytes (the unused rows of each layer's last block).
inline constexpr std::uint64_t kMaxSlackBytes = std::uint64_t{256} << 20;

// Bytes of the unused rows of the last block of `slots` tokens in blocks of
// `block_tokens`; saturates at UINT64_MAX.
std::uint64_t SlackBytes(std::int64_t slots, std::int64_t block_tokens,
                         std::uint64_t bytes_per_token) noexcept;

// XXH3 over every entry of `metadata` (string values) but "metadata_checksum":
// key and value, ascending by key, each prefixed by its length; 16 hex digits.
std::string EntriesChecksum(const json& metadata);

// The caller's entries of a file's "__metadata__" (keys without kUserPrefix),
// after checking that every entry is a string, either one of `own` or the
// caller's, and that "metadata_checksum" matches (FileFormatError otherwise).
std::map<std::string, std::string> UserEntries(const json& metadata,
                                               std::span<const std::string_view> own);
// Throws ringkv::Error "[function] metadata <what> (bytes ...) is not valid
// UTF-8" unless `text` can be written into a header.
void CheckUserText(const char* function, const std::string& text, const std::string& what);

}  // namespace ringkv::detail
