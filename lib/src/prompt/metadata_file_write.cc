#include "metadata_file_write.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "caches_format.h"
#include "file_frame.h"
#include "ringkv/error.h"

namespace ringkv::detail {

void CheckUserMetadata(const char* function, const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata) {
    CheckUserText(function, key, "key");
    CheckUserText(function, value, fmt::format("value of key \"{}\"", key.substr(0, 64)));
  }
}

void WriteMetadataFile(const std::string& path, const MetadataFileFormat& format,
                       const json& caches, std::span<const int> tokens,
                       const std::map<std::string, std::string>& metadata, TensorWriter& writer,
                       const char* function) {
  json meta = {{"format", format.format},
               {"version", std::to_string(format.version)},
               {"caches", caches.dump()},
               {"tokens", json(std::vector<int>(tokens.begin(), tokens.end())).dump()},
               {"checksums", writer.checksums.dump()}};
  for (const auto& [key, value] : metadata) meta[std::string(kUserPrefix) + key] = value;
  meta["metadata_checksum"] = EntriesChecksum(meta);
  json header = std::move(writer.entries);
  header["__metadata__"] = std::move(meta);
  const std::vector<std::byte> framed = FrameHeader(header);
  if (framed.size() - 8 > format.header_limit) {
    throw Error(
        fmt::format("[{}] the header takes {} bytes, over the limit of {} that {} accepts (fewer "
                    "tokens or less metadata)",
                    function, framed.size() - 8, format.header_limit, format.loader));
  }
  WriteTensorFile(path, framed, writer.tensors, function);
}

}  // namespace ringkv::detail
