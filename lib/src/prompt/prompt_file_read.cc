// Loading: every field of a prompt cache file is checked against the caller's
// model before any snapshot is built; nothing here touches the live state.
#include <fmt/format.h>

#define XXH_INLINE_ALL  // header-only: nothing for users of ringkv_core to link
#include <xxhash.h>

#include <climits>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "prompt_file.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/snapshot_data.h"

namespace ringkv::detail {
namespace {

using nlohmann::json;

template <class... Args>
[[noreturn]] void Bad(fmt::format_string<Args...> format, Args&&... args) {
  throw SnapshotError("[PromptCache::Load] " + fmt::format(format, std::forward<Args>(args)...));
}

const json& Field(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) Bad("{} has no \"{}\"", where, key);
  return *it;
}

std::int64_t Int(const json& object, const char* key, const std::string& where, std::int64_t lo,
                 std::int64_t hi) {
  const json& v = Field(object, key, where);
  if (!v.is_number_integer()) Bad("{}.{} is not an integer", where, key);
  const bool is_unsigned = v.is_number_unsigned();
  if (is_unsigned && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    Bad("{}.{} {} is out of range [{}, {}]", where, key, v.get<std::uint64_t>(), lo, hi);
  }
  const std::int64_t x =
      is_unsigned ? static_cast<std::int64_t>(v.get<std::uint64_t>()) : v.get<std::int64_t>();
  if (x < lo || x > hi) Bad("{}.{} {} is out of range [{}, {}]", where, key, x, lo, hi);
  return x;
}

std::string String(const json& object, const char* key, const std::string& where) {
  const json& v = Field(object, key, where);
  if (!v.is_string()) Bad("{}.{} is not a string", where, key);
  return v.get<std::string>();
}

// A JSON text stored as a metadata string.
json Embedded(const json& metadata, const char* key) {
  const std::string text = String(metadata, key, "__metadata__");
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) Bad("__metadata__.{} is not valid JSON", key);
  return parsed;
}

DType ParseDType(const std::string& name, const std::string& where) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  Bad("{} has dtype \"{}\", not one of F32, F16, BF16", where, name);
}

std::optional<KvLayout> ParseLayout(const json& kv, const std::string& where) {
  if (kv.is_null()) return std::nullopt;
  if (!kv.is_object()) Bad("{} is not an object", where);
  KvLayout layout;
  layout.dtype = ParseDType(String(kv, "dtype", where), where + ".dtype");
  layout.heads = Int(kv, "heads", where, 1, INT_MAX);
  layout.k_dim = Int(kv, "key_dim", where, 1, INT_MAX);
  layout.v_dim = Int(kv, "value_dim", where, 1, INT_MAX);
  return layout;
}

// The layers' kinds against the caches', and each layer's K/V layout against what
// the caches hold now (where they hold anything). Returns the file's layouts.
Layouts CheckModel(const PromptState& s, const json& model) {
  if (!model.is_object()) Bad("__metadata__.model is not an object");
  const json& layers = Field(model, "layers", "model");
  if (!layers.is_array() || layers.size() != s.Layers()) {
    Bad("the file has {} layers, the model {}", layers.is_array() ? layers.size() : 0, s.Layers());
  }
  Layouts layouts(s.Layers());
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    const std::string where = fmt::format("model.layers[{}]", i);
    if (!layers[i].is_object()) Bad("{} is not an object", where);
    const std::string kind = String(layers[i], "kind", where);
    const int window =
        kind == "sliding" ? static_cast<int>(Int(layers[i], "window", where, 1, INT_MAX)) : 0;
    if (kind != "sliding" && kind != "global") Bad("{}.kind \"{}\" is unknown", where, kind);
    if (window != s.windows[i]) {
      Bad("layer {} is {} in the file, {} in the model", i,
          window == 0 ? std::string("global") : fmt::format("sliding (window {})", window),
          s.windows[i] == 0 ? std::string("global")
                            : fmt::format("sliding (window {})", s.windows[i]));
    }
    layouts[i] = ParseLayout(Field(layers[i], "kv", where), where + ".kv");
  }
  const Layouts live = CacheLayouts(s.caches);
  if (const int bad = FirstMismatch(layouts, live); bad >= 0) {
    const auto i = static_cast<std::size_t>(bad);
    Bad("layer {} holds K/V {} in the file, {} in the caches", i, LayoutName(*layouts[i]),
        LayoutName(*live[i]));
  }
  return layouts;
}

struct TensorEntry {
  DType dtype = DType::kF32;
  std::array<std::int64_t, 4> shape{};
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  bool used = false;
};

std::map<std::string, TensorEntry> ParseTensors(const json& header, std::uint64_t data_size) {
  std::map<std::string, TensorEntry> tensors;
  std::uint64_t last_end = 0;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor " + name;
    if (!info.is_object()) Bad("{} is not an object", where);
    TensorEntry e;
    e.dtype = ParseDType(String(info, "dtype", where), where);
    const json& shape = Field(info, "shape", where);
    if (!shape.is_array() || shape.size() != 4) Bad("{} must have a 4-d shape", where);
    std::uint64_t elements = 1;
    for (std::size_t d = 0; d < 4; ++d) {
      if (!shape[d].is_number_integer() || shape[d].get<std::int64_t>() < 1 ||
          shape[d].get<std::int64_t>() > INT_MAX) {
        Bad("{} has a bad shape {}", where, shape.dump());
      }
      e.shape[d] = shape[d].get<std::int64_t>();
      elements *= static_cast<std::uint64_t>(e.shape[d]);
      if (elements > data_size)
        Bad("{} with shape {} exceeds the data section", where, shape.dump());
    }
    const json& offsets = Field(info, "data_offsets", where);
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      Bad("{} has bad data_offsets", where);
    }
    e.begin = offsets[0].get<std::uint64_t>();
    e.end = offsets[1].get<std::uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      Bad("{} spans bytes [{}, {}) of a data section of {} bytes (truncated?)", where, e.begin,
          e.end, data_size);
    }
    if (e.end - e.begin != elements * SizeOf(e.dtype)) {
      Bad("{} spans {} bytes, its shape {} needs {}", where, e.end - e.begin, shape.dump(),
          elements * SizeOf(e.dtype));
    }
    last_end = std::max(last_end, e.end);
    tensors.emplace(name, e);
  }
  if (last_end != data_size) {
    Bad("the tensors end at byte {} of a data section of {} bytes", last_end, data_size);
  }
  return tensors;
}

class Decoder {
 public:
  Decoder(const PromptState& s, Layouts layouts, std::span<const std::byte> data,
          std::map<std::string, TensorEntry> tensors, const json& checksums)
      : s_(s),
        layouts_(std::move(layouts)),
        data_(data),
        tensors_(std::move(tensors)),
        checksums_(checksums) {}

  LoadedTrie Nodes(const json& nodes);

 private:
  Tensor Read(const json& layer, const char* key, const std::string& where, const KvLayout& layout,
              std::int64_t dim, std::int64_t* slots);
  std::unique_ptr<Snapshot> Layer(const json& layer, std::size_t l, const PromptNode& node,
                                  const std::string& where);

  const PromptState& s_;
  Layouts layouts_;
  std::span<const std::byte> data_;
  std::map<std::string, TensorEntry> tensors_;
  const json& checksums_;
};

Tensor Decoder::Read(const json& layer, const char* key, const std::string& where,
                     const KvLayout& layout, std::int64_t dim, std::int64_t* slots) {
  const std::string name = String(layer, key, where);
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) Bad("{} names tensor \"{}\", which the file lacks", where, name);
  TensorEntry& e = it->second;
  if (e.used) Bad("tensor {} is used twice", name);
  e.used = true;
  if (e.dtype != layout.dtype || e.shape[0] != 1 || e.shape[1] != layout.heads ||
      e.shape[3] != dim || (*slots >= 0 && e.shape[2] != *slots)) {
    Bad("tensor {} is {} [{}, {}, {}, {}], expected {} [1, {}, {}, {}]", name, DTypeName(e.dtype),
        e.shape[0], e.shape[1], e.shape[2], e.shape[3], DTypeName(layout.dtype), layout.heads,
        *slots >= 0 ? fmt::format("{}", *slots) : std::string("slots"), dim);
  }
  *slots = e.shape[2];
  const auto sum = checksums_.find(name);
  if (sum == checksums_.end() || !sum->is_string()) Bad("tensor {} has no checksum", name);
  const std::byte* bytes = data_.data() + e.begin;
  const std::size_t size = e.end - e.begin;
  const std::string actual = fmt::format("{:016x}", XXH3_64bits(bytes, size));
  if (actual != sum->get<std::string>()) {
    Bad("tensor {} has checksum {}, the header says {}", name, actual, sum->get<std::string>());
  }
  Tensor t = Tensor::Zeros(e.dtype, {e.shape[0], e.shape[1], e.shape[2], e.shape[3]});
  std::memcpy(t.MutableData(), bytes, size);
  return t;
}

std::unique_ptr<Snapshot> Decoder::Layer(const json& layer, std::size_t l, const PromptNode& node,
                                         const std::string& where) {
  const int window = s_.windows[l];
  if (layer.is_null()) {
    if (window == 0) Bad("{}: a global layer needs its K/V span", where);
    return nullptr;
  }
  if (!layer.is_object()) Bad("{} is not an object", where);
  SnapshotData data;
  data.kind = window == 0 ? SnapshotData::Kind::kKv : SnapshotData::Kind::kRotating;
  data.from = static_cast<int>(Int(layer, "from", where, 0, INT_MAX));
  data.to = static_cast<int>(Int(layer, "to", where, 0, INT_MAX));
  data.ring_index = static_cast<int>(Int(layer, "ring_index", where, 0, INT_MAX));
  if (data.to != node.end || (window == 0 && data.from != node.start)) {
    Bad("{} covers [{}, {}), the node [{}, {})", where, data.from, data.to, node.start, node.end);
  }
  if (!layouts_[l].has_value()) Bad("{} has K/V, but model.layers[{}].kv is null", where, l);
  const KvLayout& layout = *layouts_[l];
  std::int64_t slots = -1;
  data.keys = Read(layer, "keys", where, layout, layout.k_dim, &slots);
  data.values = Read(layer, "values", where, layout, layout.v_dim, &slots);
  const auto& cache = s_.caches[l];
  const std::int64_t block_tokens = window == 0
                                        ? dynamic_cast<const KVCache&>(cache).BlockTokens()
                                        : dynamic_cast<const RotatingKVCache&>(cache).BlockTokens();
  try {
    return ImportSnapshot(data, window, block_tokens);
  } catch (const Error& e) {
    Bad("{}: {}", where, e.what());
  }
}

LoadedTrie Decoder::Nodes(const json& nodes) {
  if (!nodes.is_array()) Bad("__metadata__.nodes is not an array");
  LoadedTrie trie;
  trie.layouts = layouts_;
  trie.root = std::make_unique<PromptNode>();
  std::vector<PromptNode*> index;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string where = fmt::format("node {}", i);
    if (!n.is_object()) Bad("{} is not an object", where);
    const std::int64_t parent_index = Int(n, "parent", where, -1, static_cast<std::int64_t>(i) - 1);
    PromptNode* parent =
        parent_index < 0 ? trie.root.get() : index[static_cast<std::size_t>(parent_index)];
    auto node = std::make_unique<PromptNode>();
    node->parent = parent;
    node->start = static_cast<int>(Int(n, "start", where, 0, INT_MAX));
    node->end = static_cast<int>(Int(n, "end", where, 1, INT_MAX));
    if (node->start != parent->end || node->end <= node->start) {
      Bad("{} covers [{}, {}) but its parent ends at {}", where, node->start, node->end,
          parent->end);
    }
    const json& tokens = Field(n, "tokens", where);
    if (!tokens.is_array() || tokens.size() != static_cast<std::size_t>(node->end - node->start)) {
      Bad("{} must have {} tokens", where, node->end - node->start);
    }
    for (const json& t : tokens) {
      if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() > INT_MAX) {
        Bad("{} has a bad token {}", where, t.dump());
      }
      node->tokens.push_back(t.get<int>());
    }
    for (const auto& sibling : parent->children) {
      if (sibling->tokens.front() == node->tokens.front()) {
        Bad("{} starts with token {} like a sibling", where, node->tokens.front());
      }
    }
    const json& pinned = Field(n, "pinned", where);
    if (!pinned.is_boolean()) Bad("{}.pinned is not a boolean", where);
    node->pinned = pinned.get<bool>();
    if (node->pinned && parent != trie.root.get() && !parent->pinned) {
      Bad("{} is pinned but its parent is not", where);
    }
    node->last_used = static_cast<std::uint64_t>(Int(n, "last_used", where, 0, INT64_MAX));
    trie.clock = std::max(trie.clock, node->last_used);
    const json& layers = Field(n, "layers", where);
    if (!layers.is_array() || layers.size() != s_.Layers()) {
      Bad("{} must have {} layers", where, s_.Layers());
    }
    std::vector<std::unique_ptr<Snapshot>> snapshots;
    for (std::size_t l = 0; l < s_.Layers(); ++l) {
      snapshots.push_back(Layer(layers[l], l, *node, fmt::format("{} layer {}", where, l)));
    }
    node->snapshot = std::make_unique<LayerSnapshot>(std::move(snapshots));
    CompactSmall(s_, node->snapshot.get());
    trie.held.Add(node->snapshot.get());
    index.push_back(node.get());
    parent->children.push_back(std::move(node));
  }
  for (const auto& [name, e] : tensors_) {
    if (!e.used) Bad("tensor {} belongs to no node", name);
  }
  return trie;
}

}  // namespace

LoadedTrie DecodeFile(const PromptState& s, std::span<const std::byte> file) {
  if (file.size() < 8)
    Bad("the file has {} bytes, fewer than the 8-byte header length", file.size());
  std::uint64_t length = 0;
  for (int b = 7; b >= 0; --b)
    length = (length << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(b)]);
  if (length > file.size() - 8 || length > kMaxHeaderBytes) {
    Bad("the header length {} exceeds the {} bytes that follow it", length, file.size() - 8);
  }
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  try {
    const json header = json::parse(text, text + length, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded() || !header.is_object()) Bad("the header is not a JSON object");
    const json& metadata = Field(header, "__metadata__", "the header");
    if (!metadata.is_object()) Bad("__metadata__ is not an object");
    const std::string format = String(metadata, "format", "__metadata__");
    if (format != kFileFormat) Bad("format \"{}\" is not \"{}\"", format, kFileFormat);
    const std::string version = String(metadata, "version", "__metadata__");
    if (version != std::to_string(kFileVersion)) {
      Bad("version {} is not supported (expected {})", version, kFileVersion);
    }
    const std::string fingerprint = String(metadata, "fingerprint", "__metadata__");
    if (fingerprint != s.options.fingerprint) {
      Bad("fingerprint \"{}\" does not match the model's \"{}\"", fingerprint,
          s.options.fingerprint);
    }
    const std::string expected = MetadataChecksum(String(metadata, "model", "__metadata__"),
                                                  String(metadata, "nodes", "__metadata__"),
                                                  String(metadata, "checksums", "__metadata__"));
    const std::string stated = String(metadata, "metadata_checksum", "__metadata__");
    if (stated != expected) {
      Bad("the metadata has checksum {}, the header says {}", expected, stated);
    }
    Layouts layouts = CheckModel(s, Embedded(metadata, "model"));
    const json checksums = Embedded(metadata, "checksums");
    if (!checksums.is_object()) Bad("__metadata__.checksums is not an object");
    const std::span<const std::byte> data = file.subspan(8 + length);
    Decoder decoder(s, std::move(layouts), data, ParseTensors(header, data.size()), checksums);
    return decoder.Nodes(Embedded(metadata, "nodes"));
  } catch (const json::exception& e) {
    Bad("malformed header: {}", e.what());
  }
}

}  // namespace ringkv::detail
