#include "json_fields.h"

#include <climits>

namespace ringkv::detail {
namespace {

// The deepest [ / { nesting outside strings; no allocation, no recursion.
int NestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxJsonDepth) return deepest;  // enough to refuse
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string Cut(const std::string& s) {
  constexpr std::size_t kMax = 64;
  return s.size() <= kMax ? s : s.substr(0, kMax) + "...";
}

}  // namespace

void LoadError(const std::string& message) { throw FileFormatError(message); }

json ParseBounded(std::string_view text, const std::string& what) {
  if (NestingDepth(text) > kMaxJsonDepth) {
    Bad("{} is JSON nested more than {} levels deep", what, kMaxJsonDepth);
  }
  json parsed = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) Bad("{} is not valid JSON", what);
  return parsed;
}

std::string Describe(const json& value) {
  if (value.is_array()) return fmt::format("an array of {} elements", value.size());
  if (value.is_object()) return fmt::format("an object of {} keys", value.size());
  if (value.is_string()) return "\"" + Cut(value.get_ref<const std::string&>()) + "\"";
  return Cut(value.dump());  // a number, true, false or null
}

const json& Field(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) Bad("{} has no \"{}\"", where, key);
  return *it;
}

std::int64_t Int(const json& object, const char* key, const std::string& where, std::int64_t lo,
                 std::int64_t hi) {
  const json& v = Field(object, key, where);
  if (!v.is_number_integer()) Bad("{}.{} {} is not an integer", where, key, Describe(v));
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi)) {
      Bad("{}.{} {} is out of range [{}, {}]", where, key, u, lo, hi);
    }
    if (static_cast<std::int64_t>(u) < lo) {
      Bad("{}.{} {} is out of range [{}, {}]", where, key, u, lo, hi);
    }
    return static_cast<std::int64_t>(u);
  }
  const auto x = v.get<std::int64_t>();
  if (x < lo || x > hi) Bad("{}.{} {} is out of range [{}, {}]", where, key, x, lo, hi);
  return x;
}

std::string String(const json& object, const char* key, const std::string& where) {
  const json& v = Field(object, key, where);
  if (!v.is_string()) Bad("{}.{} {} is not a string", where, key, Describe(v));
  return v.get<std::string>();
}

bool Bool(const json& object, const char* key, const std::string& where) {
  const json& v = Field(object, key, where);
  if (!v.is_boolean()) Bad("{}.{} {} is not a boolean", where, key, Describe(v));
  return v.get<bool>();
}

std::vector<int> Tokens(const json& array, const std::string& where) {
  if (!array.is_array()) Bad("{} is {}, not an array of tokens", where, Describe(array));
  std::vector<int> tokens;
  tokens.reserve(array.size());
  for (const json& t : array) {
    const bool ok = t.is_number_integer() &&
                    (t.is_number_unsigned()
                         ? t.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT_MAX)
                         : t.get<std::int64_t>() >= INT_MIN && t.get<std::int64_t>() <= INT_MAX);
    if (!ok) Bad("{} has token {}, not an int", where, Describe(t));
    tokens.push_back(static_cast<int>(t.get<std::int64_t>()));
  }
  return tokens;
}

bool IsJsonString(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

std::string HexPrefix(const std::string& text) {
  constexpr std::size_t kMax = 32;
  std::string hex;
  for (const char c : text.substr(0, kMax))
    hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return text.size() > kMax ? hex + "..." : hex;
}

DType ParseDType(const std::string& name, const std::string& where) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  Bad("{} has dtype \"{}\", not one of F32, F16, BF16", where, name.substr(0, 16));
}

const char* SafetensorsDType(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;  // quantized blocks are not safetensors tensors of one element type
  }
  return "?";
}

}  // namespace ringkv::detail
