#include "caches_format.h"

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

}  // namespace ringkv::detail
