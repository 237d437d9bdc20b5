// Loading: the header is bounded and checked, then the node list, then the
// tensors are read one at a time (file_nodes.h); nothing here touches the live
// state, and every failure is a ringkv::SnapshotError "[PromptCache::Load] ...".
#include <fmt/format.h>

#include <climits>

#include "file_frame.h"
#include "file_layer.h"
#include "file_nodes.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "prompt_file.h"
#include "ringkv/error.h"

namespace ringkv::detail {
namespace {

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

}  // namespace

std::size_t MaxHeaderBytes(std::size_t byte_budget) noexcept {
  return std::max(kMinHeaderLimit, byte_budget / 16);
}

LoadedTrie DecodeFile(const PromptState& s, const ByteSource& source) {
  return Prefixed("PromptCache::Load", [&] {
    try {
      Layouts layouts;
      TensorTable tensors;
      std::string nodes_text;
      std::uint64_t data_offset = 0;
      {
        const FileHeader file = ReadHeader(source, MaxHeaderBytes(s.options.byte_budget),
                                           "max(16 MiB, byte_budget / 16)");
        data_offset = file.data_offset;
        const json& metadata = CheckedMetadata(file.header, kPromptCacheFormat, kFileVersion);
        const std::string fingerprint = String(metadata, "fingerprint", "__metadata__");
        if (fingerprint != s.options.fingerprint) {
          Bad("fingerprint {} does not match the model's {}", Describe(json(fingerprint)),
              Describe(json(s.options.fingerprint)));
        }
        const std::string model_text = String(metadata, "model", "__metadata__");
        nodes_text = String(metadata, "nodes", "__metadata__");
        const std::string checksums_text = String(metadata, "checksums", "__metadata__");
        const std::string expected = MetadataChecksum(model_text, nodes_text, checksums_text);
        const std::string stated = String(metadata, "metadata_checksum", "__metadata__");
        if (stated != expected) {
          Bad("the metadata has checksum {}, the header says {}", expected, Describe(json(stated)));
        }
        layouts = CheckModel(s, ParseBounded(model_text, "__metadata__.model"));
        tensors = ParseTensors(file.header, file.data_size);
        AttachChecksums(tensors, ParseBounded(checksums_text, "__metadata__.checksums"));
      }  // the header's DOM is gone before the node list is parsed
      std::vector<NodeRecord> records;
      {
        const json nodes = ParseBounded(nodes_text, "__metadata__.nodes");
        nodes_text = std::string();
        records = ParseNodes(s, layouts, nodes, tensors);
      }
      PlanWithinBudget(records, s.options.byte_budget);
      return BuildTrie(s, records, source, data_offset, std::move(layouts));
    } catch (const json::exception& e) {
      Bad("malformed header: {}", e.what());
    }
  });
}

}  // namespace ringkv::detail
