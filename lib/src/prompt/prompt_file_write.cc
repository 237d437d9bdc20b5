// Saving: the safetensors header and the tensors in data order.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "file_frame.h"
#include "file_layer.h"
#include "file_tensors.h"
#include "json_fields.h"
#include "prompt_file.h"

namespace ringkv::detail {
namespace {

// Per layer: its kind and the K/V layout of its snapshots (null when nothing is held).
json ModelJson(const PromptState& s) {
  json layers = json::array();
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    json layer = s.windows[i] == 0 ? json{{"kind", "global"}}
                                   : json{{"kind", "sliding"}, {"window", s.windows[i]}};
    layer["kv"] = LayoutJson(s.layouts[i]);
    layers.push_back(std::move(layer));
  }
  return json{{"layers", std::move(layers)}};
}

}  // namespace

std::string MetadataChecksum(std::string_view model, std::string_view nodes,
                             std::string_view checksums) {
  const std::string_view texts[] = {model, nodes, checksums};
  return TextsChecksum(texts);
}

std::vector<std::byte> EncodeHeader(const PromptState& s, std::span<const PromptNode* const> nodes,
                                    std::vector<TensorBytes>& tensors, const char* function) {
  TensorWriter writer;
  json nodes_json = json::array();
  std::map<const PromptNode*, int> index;
  for (const PromptNode* node : nodes) {
    const int i = static_cast<int>(index.size());
    index[node] = i;
    const auto parent = index.find(node->parent);
    json layers = json::array();
    for (std::size_t l = 0; l < s.Layers(); ++l) {
      const Snapshot* snapshot = node->Layer(l);
      layers.push_back(snapshot == nullptr ? json(nullptr)
                                           : EncodeLayer(*snapshot, fmt::format("n{}.l{}", i, l),
                                                         writer, function));
    }
    nodes_json.push_back(json{{"parent", parent == index.end() ? -1 : parent->second},
                              {"start", node->start},
                              {"end", node->end},
                              {"tokens", node->tokens},
                              {"pinned", node->pinned},
                              {"last_used", node->last_used},
                              {"layers", std::move(layers)}});
  }
  const std::string model = ModelJson(s).dump();
  const std::string nodes_text = nodes_json.dump();
  const std::string checksums_text = writer.checksums.dump();
  json header = std::move(writer.entries);
  header["__metadata__"] =
      json{{"format", kPromptCacheFormat},
           {"version", std::to_string(kFileVersion)},
           {"fingerprint", s.options.fingerprint},
           {"model", model},
           {"nodes", nodes_text},
           {"checksums", checksums_text},
           {"metadata_checksum", MetadataChecksum(model, nodes_text, checksums_text)}};
  tensors = std::move(writer.tensors);
  return FrameHeader(header);
}

}  // namespace ringkv::detail
