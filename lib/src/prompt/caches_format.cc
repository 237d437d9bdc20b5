#include "caches_format.h"

#include <algorithm>
#include <vector>

#include "file_frame.h"

namespace ringkv::detail {

std::uint64_t SlackBytes(std::int64_t slots, std::int64_t block_tokens,
                         std::uint64_t bytes_per_token) noexcept {
  const auto rows =
      static_cast<std::uint64_t>((block_tokens - slots % block_tokens) % block_tokens);
  if (rows != 0 && bytes_per_token > UINT64_MAX / rows) return UINT64_MAX;
  return rows * bytes_per_token;
}

std::string EntriesChecksum(const json& metadata) {
  std::vector<std::string_view> texts;
  for (const auto& [key, value] : metadata.items()) {
    if (key == "metadata_checksum") continue;
    texts.push_back(key);
    texts.push_back(value.get_ref<const std::string&>());
  }
  return TextsChecksum(texts);
}

std::map<std::string, std::string> UserEntries(const json& metadata,
                                               std::span<const std::string_view> own) {
  std::map<std::string, std::string> user;
  for (const auto& [key, value] : metadata.items()) {
    const std::string where = fmt::format("__metadata__.{}", Describe(json(key)));
    if (!value.is_string()) Bad("{} is {}, not a string", where, Describe(value));
    if (key.starts_with(kUserPrefix)) {
      user.emplace(key.substr(kUserPrefix.size()), value.get<std::string>());
    } else if (std::ranges::find(own, key) == own.end()) {
      Bad("__metadata__ has key {}, neither ringkv's nor the caller's (\"{}...\")",
          Describe(json(key)), kUserPrefix);
    }
  }
  const std::string stated = String(metadata, "metadata_checksum", "__metadata__");
  const std::string expected = EntriesChecksum(metadata);
  if (stated != expected) {
    Bad("the metadata has checksum {}, the header says {}", expected, Describe(json(stated)));
  }
  return user;
}

void CheckUserText(const char* function, const std::string& text, const std::string& what) {
  if (!IsJsonString(text)) {
    throw Error(fmt::format("[{}] metadata {} (bytes {}) is not valid UTF-8", function, what,
                            HexPrefix(text)));
  }
}

}  // namespace ringkv::detail
