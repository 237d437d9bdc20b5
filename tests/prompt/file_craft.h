#pragma once
// Builds prompt cache files by hand for the hostile-input tests: parses a file
// into its header, the three embedded JSON texts and the data section, lets a
// test change any of them, and reassembles it with a valid metadata checksum
// (so the loader gets past that check to the part under test).

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ringkv::test {

// The whole file as bytes (empty when it cannot be read).
inline std::vector<std::byte> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

struct CraftedFile {
  nlohmann::json header;  // tensor entries and __metadata__
  nlohmann::json model;
  nlohmann::json nodes;
  nlohmann::json checksums;
  std::vector<std::byte> data;

  static std::uint64_t LengthField(const std::vector<std::byte>& file) {
    std::uint64_t n = 0;
    for (int b = 7; b >= 0; --b)
      n = (n << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(b)]);
    return n;
  }

  static CraftedFile Parse(const std::vector<std::byte>& file) {
    CraftedFile f;
    const std::uint64_t n = LengthField(file);
    const auto* text = reinterpret_cast<const char*>(file.data() + 8);
    f.header = nlohmann::json::parse(text, text + n);
    const nlohmann::json& meta = f.header["__metadata__"];
    f.model = nlohmann::json::parse(meta["model"].get<std::string>());
    f.nodes = nlohmann::json::parse(meta["nodes"].get<std::string>());
    f.checksums = nlohmann::json::parse(meta["checksums"].get<std::string>());
    f.data.assign(file.begin() + static_cast<std::ptrdiff_t>(8 + n), file.end());
    return f;
  }

  static std::string Hex(std::uint64_t h) {
    char buffer[17];
    std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(h));
    return buffer;
  }

  // The checksum of every tensor entry's bytes, from the data section.
  void RecomputeTensorChecksums() {
    checksums = nlohmann::json::object();
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      const auto begin = info["data_offsets"][0].get<std::uint64_t>();
      const auto end = info["data_offsets"][1].get<std::uint64_t>();
      checksums[name] = Hex(XXH3_64bits(data.data() + begin, end - begin));
    }
  }

  // The file bytes, with `header_text` (e.g. edited by hand) as the header.
  static std::vector<std::byte> Assemble(std::string header_text,
                                         const std::vector<std::byte>& data) {
    header_text.append((8 - header_text.size() % 8) % 8, ' ');
    std::vector<std::byte> out(8 + header_text.size());
    const std::uint64_t length = header_text.size();
    for (int b = 0; b < 8; ++b)
      out[static_cast<std::size_t>(b)] = std::byte((length >> (8 * b)) & 0xff);
    std::memcpy(out.data() + 8, header_text.data(), header_text.size());
    out.insert(out.end(), data.begin(), data.end());
    return out;
  }

  std::string HeaderText() {
    const std::string m = model.dump(), n = nodes.dump(), c = checksums.dump();
    const std::string joined = std::to_string(m.size()) + ":" + m + std::to_string(n.size()) + ":" +
                               n + std::to_string(c.size()) + ":" + c;
    nlohmann::json& meta = header["__metadata__"];
    meta["model"] = m;
    meta["nodes"] = n;
    meta["checksums"] = c;
    meta["metadata_checksum"] = Hex(XXH3_64bits(joined.data(), joined.size()));
    return header.dump();
  }

  std::vector<std::byte> Bytes() { return Assemble(HeaderText(), data); }
};

}  // namespace ringkv::test
