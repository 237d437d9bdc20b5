// Saving: the safetensors header and the tensors in data order.
#include <fmt/format.h>

#define XXH_INLINE_ALL  // header-only: nothing for users of ringkv_core to link
#include <xxhash.h>

#include <map>
#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "prompt_file.h"
#include "ringkv/snapshot_data.h"

namespace ringkv::detail {
namespace {

// Per layer: its kind and the K/V layout of its snapshots (null when nothing is held).
json ModelJson(const PromptState& s) {
  json layers = json::array();
  for (std::size_t i = 0; i < s.Layers(); ++i) {
    json layer = s.windows[i] == 0 ? json{{"kind", "global"}}
                                   : json{{"kind", "sliding"}, {"window", s.windows[i]}};
    const std::optional<KvLayout>& kv = s.layouts[i];
    layer["kv"] = kv.has_value() ? json{{"dtype", SafetensorsDType(kv->dtype)},
                                        {"heads", kv->heads},
                                        {"key_dim", kv->k_dim},
                                        {"value_dim", kv->v_dim}}
                                 : json(nullptr);
    layers.push_back(std::move(layer));
  }
  return json{{"layers", std::move(layers)}};
}

}  // namespace

std::string MetadataChecksum(std::string_view model, std::string_view nodes,
                             std::string_view checksums) {
  const std::string joined = fmt::format("{}:{}{}:{}{}:{}", model.size(), model, nodes.size(),
                                         nodes, checksums.size(), checksums);
  return fmt::format("{:016x}", XXH3_64bits(joined.data(), joined.size()));
}

std::vector<std::byte> EncodeHeader(const PromptState& s, std::span<const PromptNode* const> nodes,
                                    std::vector<Tensor>& tensors) {
  json header = json::object();
  json nodes_json = json::array();
  json checksums = json::object();
  std::map<const PromptNode*, int> index;
  std::uint64_t offset = 0;
  auto add_tensor = [&](const std::string& name, const Tensor& t) {
    const std::uint64_t bytes = t.NumBytes();
    header[name] = json{{"dtype", SafetensorsDType(t.Dtype())},
                        {"shape", {t.Dim(0), t.Dim(1), t.Dim(2), t.Dim(3)}},
                        {"data_offsets", {offset, offset + bytes}}};
    checksums[name] = fmt::format("{:016x}", XXH3_64bits(t.Data(), bytes));
    offset += bytes;
    tensors.push_back(t);
  };
  for (const PromptNode* node : nodes) {
    const int i = static_cast<int>(index.size());
    index[node] = i;
    const auto parent = index.find(node->parent);
    json layers = json::array();
    for (std::size_t l = 0; l < s.Layers(); ++l) {
      const Snapshot* snapshot = node->Layer(l);
      if (snapshot == nullptr) {
        layers.push_back(nullptr);
        continue;
      }
      const SnapshotData data = ExportSnapshot(*snapshot);
      const std::string keys = fmt::format("n{}.l{}.keys", i, l);
      const std::string values = fmt::format("n{}.l{}.values", i, l);
      add_tensor(keys, data.keys);
      add_tensor(values, data.values);
      layers.push_back(json{{"from", data.from},
                            {"to", data.to},
                            {"ring_index", data.ring_index},
                            {"keys", keys},
                            {"values", values}});
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
  const std::string checksums_text = checksums.dump();
  header["__metadata__"] =
      json{{"format", kFileFormat},
           {"version", std::to_string(kFileVersion)},
           {"fingerprint", s.options.fingerprint},
           {"model", model},
           {"nodes", nodes_text},
           {"checksums", checksums_text},
           {"metadata_checksum", MetadataChecksum(model, nodes_text, checksums_text)}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // tensor data starts 8-byte aligned
  std::vector<std::byte> out(8 + text.size());
  std::uint64_t length = text.size();
  for (int b = 0; b < 8; ++b)
    out[static_cast<std::size_t>(b)] = std::byte((length >> (8 * b)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

}  // namespace ringkv::detail
