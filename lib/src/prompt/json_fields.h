#pragma once
// Reading a ringkv file's JSON safely (prompt cache and caches files): texts are
// checked for nesting depth before nlohmann parses them (its dump() and error
// paths recurse), fields are read with range checks, and values are described in
// error messages in a bounded number of characters. Every failure is a
// FileFormatError, which each loader turns into a ringkv::SnapshotError named
// after itself (Prefixed), e.g. "[PromptCache::Load] ...".

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ringkv/dtype.h"
#include "ringkv/error.h"

namespace ringkv::detail {

using nlohmann::json;

// Deeper than any file ringkv writes (the header nests 3 levels, the node list 4).
inline constexpr int kMaxJsonDepth = 16;

// A problem in a file, described without the loader's name: shared readers
// cannot know which public function called them.
class FileFormatError : public SnapshotError {
 public:
  using SnapshotError::SnapshotError;
};

[[noreturn]] void LoadError(const std::string& message);

// Runs body() and gives every FileFormatError it throws the prefix "[function] ".
template <class Body>
decltype(auto) Prefixed(const char* function, Body&& body) {
  try {
    return body();
  } catch (const FileFormatError& e) {
    throw SnapshotError(fmt::format("[{}] {}", function, e.what()));
  }
}

template <class... Args>
[[noreturn]] void Bad(fmt::format_string<Args...> format, Args&&... args) {
  LoadError(fmt::format(format, std::forward<Args>(args)...));
}

// Parses `text` (named `what` in messages) after checking its nesting depth.
json ParseBounded(std::string_view text, const std::string& what);

// A value in at most ~80 characters: numbers and literals as written, strings
// quoted and cut, arrays and objects by their size.
std::string Describe(const json& value);

const json& Field(const json& object, const char* key, const std::string& where);
std::int64_t Int(const json& object, const char* key, const std::string& where, std::int64_t lo,
                 std::int64_t hi);
std::string String(const json& object, const char* key, const std::string& where);
bool Bool(const json& object, const char* key, const std::string& where);
// Token ids: an array of any ints (negative ones included).
std::vector<int> Tokens(const json& array, const std::string& where);
// Whether `text` can be written as a JSON string (valid UTF-8, by the JSON
// library's own rule, so writing a header never fails on it).
bool IsJsonString(const std::string& text);
// The first bytes of `text` in hex, for messages about text that cannot be printed.
std::string HexPrefix(const std::string& text);
// "F32", "F16", "BF16" (safetensors' names).
DType ParseDType(const std::string& name, const std::string& where);
const char* SafetensorsDType(DType dtype) noexcept;

}  // namespace ringkv::detail
