#pragma once
// Reading a prompt cache file's JSON safely: texts are checked for nesting depth
// before nlohmann parses them (its dump() and error paths recurse), fields are
// read with range checks, and values are described in error messages in a
// bounded number of characters. Every failure is a ringkv::SnapshotError
// "[PromptCache::Load] ...".

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ringkv/dtype.h"

namespace ringkv::detail {

using nlohmann::json;

// Deeper than any file ringkv writes (the header nests 3 levels, the node list 4).
inline constexpr int kMaxJsonDepth = 16;

[[noreturn]] void LoadError(const std::string& message);

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
// "F32", "F16", "BF16" (safetensors' names).
DType ParseDType(const std::string& name, const std::string& where);
const char* SafetensorsDType(DType dtype) noexcept;

}  // namespace ringkv::detail
