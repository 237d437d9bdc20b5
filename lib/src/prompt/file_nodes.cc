#include "file_nodes.h"

#define XXH_INLINE_ALL  // header-only: nothing for users of ringkv_core to link
#include <xxhash.h>

#include <climits>
#include <queue>
#include <unordered_set>

#include "ringkv/error.h"
#include "ringkv/snapshot_data.h"
#include "span_storage.h"

namespace ringkv::detail {
namespace {

const TensorTable::value_type* TensorRef(const json& layer, const char* key,
                                         const std::string& where, const KvLayout& layout,
                                         std::int64_t dim, std::int64_t* slots,
                                         TensorTable& tensors) {
  const std::string name = String(layer, key, where);
  const auto it = tensors.find(name);
  if (it == tensors.end())
    Bad("{} names tensor \"{}\", which the file lacks", where, name.substr(0, 64));
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
  return &*it;
}

// The bytes the imported snapshot will hold once stored as the trie stores it
// (ImportSnapshot's blocks: a span at its phase, a ring from row 0; then
// span_storage.h's compaction).
std::size_t PredictedBytes(const LayerRecord& r, const KvLayout& layout, int window,
                           std::int64_t block_tokens) {
  const std::int64_t phase = window == 0 ? r.from % block_tokens : 0;
  return CompactBytes(r.slots, phase, block_tokens, window, layout.BytesPerToken());
}

// What ImportSnapshot requires (snapshot_data.h), checked from the header, so a
// node the budget drops is checked without importing it.
void CheckImportable(const LayerRecord& r, int window, const std::string& where) {
  if (r.from >= r.to) Bad("{}: offsets [{}, {}) must satisfy from < to", where, r.from, r.to);
  if (window == 0) {
    if (r.slots != r.to - r.from) {
      Bad("{}: a span [{}, {}) cannot hold {} slots", where, r.from, r.to, r.slots);
    }
    return;
  }
  const bool ok = r.to <= window
                      ? r.slots == r.to && r.ring_index == r.to
                      : (r.slots == window && r.ring_index >= 1 && r.ring_index <= window) ||
                            (r.slots > window && r.slots <= r.to && r.ring_index == r.slots);
  if (!ok) {
    Bad("{}: a window of {} at offset {} cannot hold {} slots with ring index {}", where, window,
        r.to, r.slots, r.ring_index);
  }
}

LayerRecord ParseLayer(const PromptState& s, const Layouts& layouts, const json& layer,
                       std::size_t l, const NodeRecord& node, const std::string& where,
                       TensorTable& tensors) {
  LayerRecord r;
  const int window = s.windows[l];
  if (layer.is_null()) {
    if (window == 0) Bad("{}: a global layer needs its K/V span", where);
    return r;
  }
  if (!layer.is_object()) Bad("{} is {}, not an object", where, Describe(layer));
  r.present = true;
  r.from = static_cast<int>(Int(layer, "from", where, 0, INT_MAX));
  r.to = static_cast<int>(Int(layer, "to", where, 0, INT_MAX));
  r.ring_index = static_cast<int>(Int(layer, "ring_index", where, 0, INT_MAX));
  if (r.to != node.end || (window == 0 && r.from != node.start)) {
    Bad("{} covers [{}, {}), the node [{}, {})", where, r.from, r.to, node.start, node.end);
  }
  if (!layouts[l].has_value()) Bad("{} has K/V, but model.layers[{}].kv is null", where, l);
  const KvLayout& layout = *layouts[l];
  std::int64_t slots = -1;
  r.keys = TensorRef(layer, "keys", where, layout, layout.k_dim, &slots, tensors);
  r.values = TensorRef(layer, "values", where, layout, layout.v_dim, &slots, tensors);
  r.slots = slots;
  CheckImportable(r, window, where);
  return r;
}

}  // namespace

std::vector<NodeRecord> ParseNodes(const PromptState& s, const Layouts& layouts, const json& nodes,
                                   TensorTable& tensors) {
  if (!nodes.is_array()) Bad("__metadata__.nodes is {}, not an array", Describe(nodes));
  std::vector<NodeRecord> out;
  out.reserve(nodes.size());
  // (parent index + 1, first token) of every node: siblings start differently.
  std::unordered_set<std::uint64_t> firsts;
  firsts.reserve(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const json& n = nodes[i];
    const std::string where = fmt::format("node {}", i);
    if (!n.is_object()) Bad("{} is {}, not an object", where, Describe(n));
    NodeRecord r;
    r.parent = static_cast<int>(Int(n, "parent", where, -1, static_cast<std::int64_t>(i) - 1));
    const NodeRecord* parent = r.parent < 0 ? nullptr : &out[static_cast<std::size_t>(r.parent)];
    const int parent_end = parent == nullptr ? 0 : parent->end;
    r.start = static_cast<int>(Int(n, "start", where, 0, INT_MAX));
    r.end = static_cast<int>(Int(n, "end", where, 1, INT_MAX));
    if (r.start != parent_end || r.end <= r.start) {
      Bad("{} covers [{}, {}) but its parent ends at {}", where, r.start, r.end, parent_end);
    }
    const json& tokens = Field(n, "tokens", where);
    const auto count = static_cast<std::size_t>(r.end - r.start);
    if (!tokens.is_array() || tokens.size() != count) {
      Bad("{} must have {} tokens, not {}", where, count, Describe(tokens));
    }
    r.tokens.reserve(count);
    for (const json& t : tokens) {
      // Any int is a token id, as Commit accepts (negative ids included).
      const bool ok = t.is_number_integer() &&
                      (t.is_number_unsigned()
                           ? t.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT_MAX)
                           : t.get<std::int64_t>() >= INT_MIN && t.get<std::int64_t>() <= INT_MAX);
      if (!ok) Bad("{} has token {}, not an int", where, Describe(t));
      r.tokens.push_back(static_cast<int>(t.get<std::int64_t>()));
    }
    const std::uint64_t key = (static_cast<std::uint64_t>(r.parent + 1) << 32) |
                              static_cast<std::uint32_t>(r.tokens.front());
    if (!firsts.insert(key).second) {
      Bad("{} starts with token {} like a sibling", where, r.tokens.front());
    }
    r.pinned = Bool(n, "pinned", where);
    if (r.pinned && parent != nullptr && !parent->pinned) {
      Bad("{} is pinned but its parent is not", where);
    }
    r.last_used = static_cast<std::uint64_t>(Int(n, "last_used", where, 0, INT64_MAX));
    const json& layers = Field(n, "layers", where);
    if (!layers.is_array() || layers.size() != s.Layers()) {
      Bad("{} must have {} layers, not {}", where, s.Layers(), Describe(layers));
    }
    r.layers.reserve(s.Layers());
    for (std::size_t l = 0; l < s.Layers(); ++l) {
      r.layers.push_back(
          ParseLayer(s, layouts, layers[l], l, r, fmt::format("{} layer {}", where, l), tensors));
      if (r.layers.back().present) {
        r.bytes += PredictedBytes(r.layers.back(), *layouts[l], s.windows[l], s.block_tokens[l]);
      }
    }
    out.push_back(std::move(r));
  }
  for (const auto& [name, e] : tensors) {
    if (!e.used) Bad("tensor {} belongs to no node", name);
  }
  return out;
}

void PlanWithinBudget(std::vector<NodeRecord>& nodes, std::size_t budget) {
  std::size_t used = 0;
  for (NodeRecord& n : nodes) {
    if (!n.pinned) continue;
    n.keep = true;
    used += n.bytes;
  }
  if (used > budget) {
    Bad("the file pins {} bytes of snapshots, over the budget of {}", used, budget);
  }
  // A subtree is as recent as its most recent node (parents precede children).
  const std::size_t count = nodes.size();
  std::vector<std::uint64_t> recency(count);
  for (std::size_t i = 0; i < count; ++i) recency[i] = nodes[i].last_used;
  std::vector<int> first_child(count, -1), next_sibling(count, -1);
  for (std::size_t i = count; i-- > 0;) {
    const int p = nodes[i].parent;
    if (p < 0) continue;
    const auto parent = static_cast<std::size_t>(p);
    recency[parent] = std::max(recency[parent], recency[i]);
    next_sibling[i] = first_child[parent];
    first_child[parent] = static_cast<int>(i);
  }
  // Most recent subtree first, then file order; a node only after its parent.
  auto later = [&](int a, int b) {
    const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    return recency[ia] != recency[ib] ? recency[ia] < recency[ib] : a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(later)> frontier(later);
  for (std::size_t i = 0; i < count; ++i) {
    const int p = nodes[i].parent;
    if (!nodes[i].pinned && (p < 0 || nodes[static_cast<std::size_t>(p)].pinned)) {
      frontier.push(static_cast<int>(i));
    }
  }
  while (!frontier.empty()) {
    NodeRecord& n = nodes[static_cast<std::size_t>(frontier.top())];
    const int index = frontier.top();
    frontier.pop();
    if (used + n.bytes > budget) continue;  // and its subtree
    n.keep = true;
    used += n.bytes;
    for (int c = first_child[static_cast<std::size_t>(index)]; c >= 0;
         c = next_sibling[static_cast<std::size_t>(c)]) {
      frontier.push(c);
    }
  }
}

namespace {

class Builder {
 public:
  Builder(const PromptState& s, const ByteSource& source, std::uint64_t data_offset)
      : s_(s), source_(source), data_offset_(data_offset) {}

  // The checksums of a dropped node's tensors, read in bounded chunks.
  void Verify(const LayerRecord& r) const {
    for (const TensorTable::value_type* tensor : {r.keys, r.values}) {
      const TensorEntry& e = tensor->second;
      XXH3_state_t state;
      XXH3_64bits_reset(&state);
      std::vector<std::byte> chunk(
          static_cast<std::size_t>(std::min<std::uint64_t>(e.Bytes(), 1 << 20)));
      for (std::uint64_t at = 0; at < e.Bytes(); at += chunk.size()) {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), e.Bytes() - at));
        source_.Read(data_offset_ + e.begin + at, std::span<std::byte>(chunk.data(), n));
        XXH3_64bits_update(&state, chunk.data(), n);
      }
      Check(*tensor, XXH3_64bits_digest(&state));
    }
  }

  std::unique_ptr<Snapshot> Import(const LayerRecord& r, std::size_t l,
                                   const std::string& where) const {
    SnapshotData data;
    data.kind = s_.windows[l] == 0 ? SnapshotData::Kind::kKv : SnapshotData::Kind::kRotating;
    data.from = r.from;
    data.to = r.to;
    data.ring_index = r.ring_index;
    data.keys = Read(*r.keys);
    data.values = Read(*r.values);
    try {
      return ImportSnapshot(data, s_.windows[l], s_.block_tokens[l]);
    } catch (const Error& e) {
      Bad("{}: {}", where, e.what());
    }
  }

 private:
  // The tensor's bytes, checked against its checksum. Its size was checked
  // against the data section (and so the file) before anything was allocated.
  Tensor Read(const TensorTable::value_type& tensor) const {
    const TensorEntry& e = tensor.second;
    Tensor t = Tensor::Uninitialized(e.dtype, {e.shape[0], e.shape[1], e.shape[2], e.shape[3]});
    auto* bytes = static_cast<std::byte*>(t.MutableData());
    source_.Read(data_offset_ + e.begin, std::span<std::byte>(bytes, e.Bytes()));
    Check(tensor, XXH3_64bits(bytes, e.Bytes()));
    return t;
  }

  static void Check(const TensorTable::value_type& tensor, std::uint64_t actual) {
    if (actual != tensor.second.checksum) {
      Bad("tensor {} has checksum {:016x}, the header says {:016x}", tensor.first, actual,
          tensor.second.checksum);
    }
  }

  const PromptState& s_;
  const ByteSource& source_;
  std::uint64_t data_offset_;
};

}  // namespace

LoadedTrie BuildTrie(const PromptState& s, const std::vector<NodeRecord>& nodes,
                     const ByteSource& source, std::uint64_t data_offset, Layouts layouts) {
  const Builder builder(s, source, data_offset);
  LoadedTrie trie;
  trie.layouts = std::move(layouts);
  trie.root = std::make_unique<PromptNode>();
  std::vector<PromptNode*> built(nodes.size(), nullptr);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeRecord& r = nodes[i];
    trie.clock = std::max(trie.clock, r.last_used);
    PromptNode* parent = r.parent < 0 ? trie.root.get() : built[static_cast<std::size_t>(r.parent)];
    if (!r.keep || parent == nullptr) {
      // Dropped: checked (the metadata in ParseNodes, the bytes here), never allocated.
      for (const LayerRecord& layer : r.layers) {
        if (layer.present) builder.Verify(layer);
      }
      continue;
    }
    std::vector<std::unique_ptr<Snapshot>> snapshots(s.Layers());
    for (std::size_t l = 0; l < s.Layers(); ++l) {
      if (r.layers[l].present) {
        snapshots[l] = builder.Import(r.layers[l], l, fmt::format("node {} layer {}", i, l));
      }
    }
    auto node = std::make_unique<PromptNode>();
    node->tokens = r.tokens;
    node->start = r.start;
    node->end = r.end;
    node->pinned = r.pinned;
    node->last_used = r.last_used;
    node->parent = parent;
    node->snapshot = std::make_unique<LayerSnapshot>(std::move(snapshots));
    CompactSmall(s, node->snapshot.get());
    trie.held.Add(node->snapshot.get());
    if (trie.held.Bytes() > s.options.byte_budget) {
      // The plan's prediction was short: drop the node (and so its subtree).
      trie.held.Remove(node->snapshot.get());
      if (r.pinned) {
        Bad("the file pins more than the budget of {} bytes of snapshots", s.options.byte_budget);
      }
      continue;
    }
    built[i] = node.get();
    parent->children.push_back(std::move(node));
  }
  return trie;
}

}  // namespace ringkv::detail
