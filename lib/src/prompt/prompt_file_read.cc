// Loading: the header is bounded and checked, then the node list, then the
// tensors are read one at a time (file_nodes.h); nothing here touches the live
// state, and every failure is a ringkv::SnapshotError "[PromptCache::Load] ...".
#include <fmt/format.h>

#include <climits>

#include "file_nodes.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "prompt_file.h"
#include "ringkv/error.h"

namespace ringkv::detail {
namespace {

std::optional<KvLayout> ParseLayout(const json& kv, const std::string& where) {
  if (kv.is_null()) return std::nullopt;
  if (!kv.is_object()) Bad("{} is {}, not an object", where, Describe(kv));
  KvLayout layout;
  layout.dtype = ParseDType(String(kv, "dtype", where), where + ".dtype");
  layout.heads = Int(kv, "heads", where, 1, INT_MAX);
  layout.k_dim = Int(kv, "key_dim", where, 1, INT_MAX);
  layout.v_dim = Int(kv, "value_dim", where, 1, INT_MAX);
  return layout;
}

std::string KindName(int window) {
  return window == 0 ? std::string("global") : fmt::format("sliding (window {})", window);
}

// The layers' kinds against the caches', and each layer's K/V layout against what
// the caches hold now (where they hold anything). Returns the file's layouts.
Layouts CheckModel(const PromptState& s, const json& model) {
  if (!model.is_object()) Bad("__metadata__.model is {}, not an object", Describe(model));
  const json& layers = Field(model, "layers", "model");
  if (!layers.is_array() || layers.size() != s.Layers()) {
    Bad("the file has {} layers, the model {}", layers.is_array() ? layers.size() : 0, s.Layers());
  }
  Layouts layouts(s.Layers());
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    const std::string where = fmt::format("model.layers[{}]", i);
    if (!layers[i].is_object()) Bad("{} is {}, not an object", where, Describe(layers[i]));
    const std::string kind = String(layers[i], "kind", where);
    if (kind != "sliding" && kind != "global")
      Bad("{}.kind \"{}\" is unknown", where, kind.substr(0, 16));
    const int window =
        kind == "sliding" ? static_cast<int>(Int(layers[i], "window", where, 1, INT_MAX)) : 0;
    if (window != s.windows[i]) {
      Bad("layer {} is {} in the file, {} in the model", i, KindName(window),
          KindName(s.windows[i]));
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

std::string Cut(const std::string& s) { return s.size() <= 64 ? s : s.substr(0, 64) + "..."; }

}  // namespace

std::size_t MaxHeaderBytes(std::size_t byte_budget) noexcept {
  return std::max(kMinHeaderLimit, byte_budget / 16);
}

LoadedTrie DecodeFile(const PromptState& s, const ByteSource& source) {
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
  const std::size_t limit = MaxHeaderBytes(s.options.byte_budget);
  if (length > limit) {
    Bad("the header length {} is over the limit of {} (max(16 MiB, byte_budget / 16))", length,
        limit);
  }
  const std::uint64_t data_size = size - 8 - length;
  try {
    Layouts layouts;
    TensorTable tensors;
    std::string nodes_text;
    {
      std::string text(static_cast<std::size_t>(length), '\0');
      source.Read(8, std::as_writable_bytes(std::span<char>(text)));
      const json header = ParseBounded(text, "the header");
      text = std::string();
      if (!header.is_object()) Bad("the header is {}, not a JSON object", Describe(header));
      const json& metadata = Field(header, "__metadata__", "the header");
      if (!metadata.is_object()) Bad("__metadata__ is {}, not an object", Describe(metadata));
      const std::string format = String(metadata, "format", "__metadata__");
      if (format != kFileFormat) Bad("format \"{}\" is not \"{}\"", Cut(format), kFileFormat);
      const std::string version = String(metadata, "version", "__metadata__");
      if (version != std::to_string(kFileVersion)) {
        Bad("version {} is not supported (expected {})", Cut(version), kFileVersion);
      }
      const std::string fingerprint = String(metadata, "fingerprint", "__metadata__");
      if (fingerprint != s.options.fingerprint) {
        Bad("fingerprint \"{}\" does not match the model's \"{}\"", Cut(fingerprint),
            Cut(s.options.fingerprint));
      }
      const std::string model_text = String(metadata, "model", "__metadata__");
      nodes_text = String(metadata, "nodes", "__metadata__");
      const std::string checksums_text = String(metadata, "checksums", "__metadata__");
      const std::string expected = MetadataChecksum(model_text, nodes_text, checksums_text);
      const std::string stated = String(metadata, "metadata_checksum", "__metadata__");
      if (stated != expected) {
        Bad("the metadata has checksum {}, the header says {}", expected, Cut(stated));
      }
      layouts = CheckModel(s, ParseBounded(model_text, "__metadata__.model"));
      tensors = ParseTensors(header, data_size);
      AttachChecksums(tensors, ParseBounded(checksums_text, "__metadata__.checksums"));
    }  // the header's DOM is gone before the node list is parsed
    std::vector<NodeRecord> records;
    {
      const json nodes = ParseBounded(nodes_text, "__metadata__.nodes");
      nodes_text = std::string();
      records = ParseNodes(s, layouts, nodes, tensors);
    }
    PlanWithinBudget(records, s.options.byte_budget);
    return BuildTrie(s, records, source, 8 + length, std::move(layouts));
  } catch (const json::exception& e) {
    Bad("malformed header: {}", e.what());
  }
}

}  // namespace ringkv::detail
