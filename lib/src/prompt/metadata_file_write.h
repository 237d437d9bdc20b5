#pragma once
// The part SaveCaches and SaveSequence share: both files carry the caller's
// tokens and metadata the same way (caches_format.h, sequence_format.h) and
// differ only in the "caches" text, their tensors and the format they name.

#include <cstddef>
#include <map>
#include <span>
#include <string>

#include "file_tensors.h"
#include "json_fields.h"

namespace ringkv::detail {

// What tells the two files apart in the header and in the size-limit message.
struct MetadataFileFormat {
  const char* format;        // "__metadata__" "format"
  int version;               // "__metadata__" "version"
  std::size_t header_limit;  // the largest header the loader parses
  const char* loader;        // the function that reads the file back, for messages
};

// Throws ringkv::Error (CheckUserText) unless every key and value of `metadata`
// can be written into a header; called before any work, so a refusal costs nothing.
void CheckUserMetadata(const char* function, const std::map<std::string, std::string>& metadata);

// Writes `writer`'s tensors to `path` (atomically) under a "__metadata__" of the
// format's name and version, `caches` and `tokens` as JSON texts, the tensors'
// checksums, the caller's metadata as "user.<key>" and "metadata_checksum".
// A header the loader would refuse is not written: throws ringkv::Error.
void WriteMetadataFile(const std::string& path, const MetadataFileFormat& format,
                       const json& caches, std::span<const int> tokens,
                       const std::map<std::string, std::string>& metadata, TensorWriter& writer,
                       const char* function);

}  // namespace ringkv::detail
