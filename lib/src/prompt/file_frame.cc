#include "file_frame.h"

#define XXH_INLINE_ALL  // header-only: nothing for users of ringkv_core to link
#include <xxhash.h>

#include <cstring>

#include "atomic_file.h"

namespace ringkv::detail {
namespace {

std::string Cut(const std::string& s) { return s.size() <= 64 ? s : s.substr(0, 64) + "..."; }

// What reads a file of ringkv's other format, for the message refusing it.
const char* Reader(const std::string& format) {
  if (format == kPromptCacheFormat) return "a prompt cache file (PromptCache::Load reads it)";
  if (format == kCachesFormat) return "a caches file (LoadCaches reads it)";
  if (format == kSequenceFormat) return "a sequence file (LoadSequence reads it)";
  return nullptr;
}

}  // namespace

std::vector<std::byte> FrameHeader(const json& header) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + text.size());
  const std::uint64_t length = text.size();
  for (int b = 0; b < 8; ++b)
    out[static_cast<std::size_t>(b)] = std::byte((length >> (8 * b)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

FileHeader ReadHeader(const ByteSource& source, std::size_t limit, std::string_view limit_rule) {
  const std::uint64_t size = source.Size();
  if (size < 8) Bad("the file has {} bytes, fewer than the 8-byte header length", size);
  std::byte length_field[8];
  source.Read(0, length_field);
  std::uint64_t length = 0;
  for (int b = 7; b >= 0; --b)
    length = (length << 8) | std::to_integer<std::uint64_t>(length_field[b]);
  if (length > size - 8) {
    Bad("the header length {} exceeds the {} bytes that follow it", length, size - 8);
  }
  if (length > limit) {
    Bad("the header length {} is over the limit of {} ({})", length, limit, limit_rule);
  }
  FileHeader out;
  out.data_offset = 8 + length;
  out.data_size = size - 8 - length;
  std::string text(static_cast<std::size_t>(length), '\0');
  source.Read(8, std::as_writable_bytes(std::span<char>(text)));
  out.header = ParseBounded(text, "the header");
  if (!out.header.is_object()) Bad("the header is {}, not a JSON object", Describe(out.header));
  return out;
}

const json& CheckedMetadata(const json& header, const char* format, int version) {
  const json& metadata = Field(header, "__metadata__", "the header");
  if (!metadata.is_object()) Bad("__metadata__ is {}, not an object", Describe(metadata));
  const std::string stated = String(metadata, "format", "__metadata__");
  if (stated != format) {
    const char* reader = Reader(stated);
    Bad("format \"{}\" is not \"{}\"{}{}", Cut(stated), format, reader == nullptr ? "" : ": it is ",
        reader == nullptr ? "" : reader);
  }
  const std::string stated_version = String(metadata, "version", "__metadata__");
  if (stated_version != std::to_string(version)) {
    Bad("version {} is not supported (expected {})", Cut(stated_version), version);
  }
  return metadata;
}

std::string TextsChecksum(std::span<const std::string_view> texts) {
  std::string joined;
  for (const std::string_view text : texts)
    fmt::format_to(std::back_inserter(joined), "{}:{}", text.size(), text);
  return fmt::format("{:016x}", XXH3_64bits(joined.data(), joined.size()));
}

void WriteTensorFile(const std::string& path, std::span<const std::byte> header,
                     std::span<const TensorBytes> tensors, const char* function) {
  std::vector<std::span<const std::byte>> parts = {header};
  for (const TensorBytes& t : tensors) parts.push_back(t.Bytes());
  WriteFileAtomically(path, parts, function);
}

}  // namespace ringkv::detail
