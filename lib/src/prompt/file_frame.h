#pragma once
// The safetensors frame both ringkv file formats use (docs/prompt_cache.md,
// docs/cache_file.md): an 8-byte little-endian header length N, N bytes of JSON
// padded with spaces to a multiple of 8 (so the data starts aligned), then the
// tensor data. The header's "__metadata__" names the format and its version;
// each format checks its own, and a file of another is named as such.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "file_source.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "ringkv/tensor.h"

namespace ringkv::detail {

inline constexpr const char* kPromptCacheFormat = "ringkv.prompt_cache";
inline constexpr const char* kCachesFormat = "ringkv.caches";
inline constexpr const char* kSequenceFormat = "ringkv.sequence";

// The length field and the padded JSON text of `header`. Throws json::exception
// for a string that is not valid UTF-8.
std::vector<std::byte> FrameHeader(const json& header);

struct FileHeader {
  json header;  // a JSON object
  std::uint64_t data_offset = 0;
  std::uint64_t data_size = 0;
};
// Checks the length field against the file's size and against `limit` (whose
// rule `limit_rule` names in the message), then parses the header (bounded).
FileHeader ReadHeader(const ByteSource& source, std::size_t limit, std::string_view limit_rule);

// The header's "__metadata__", after checking that its format and version are
// `format` and `version`.
const json& CheckedMetadata(const json& header, const char* format, int version);

// XXH3_64bits over the texts, each prefixed by its length, as 16 hex digits.
std::string TextsChecksum(std::span<const std::string_view> texts);

// Writes the header and the tensors' bytes, in order, atomically (atomic_file.h).
void WriteTensorFile(const std::string& path, std::span<const std::byte> header,
                     std::span<const TensorBytes> tensors, const char* function);

}  // namespace ringkv::detail
