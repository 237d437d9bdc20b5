#include "file_nodes.h"

#include <climits>
#include <queue>
#include <unordered_set>

#include "span_storage.h"

namespace ringkv::detail {
namespace {

// The bytes the imported snapshot will hold once stored as the trie stores it
// (ImportSnapshot's blocks: a span at its phase, a ring from row 0; then
// span_storage.h's compaction).
std::size_t PredictedBytes(const LayerRecord& r, const KvLayout& layout, int window,
                           std::int64_t block_tokens) {
  const std::int64_t phase = window == 0 ? r.from % block_tokens : 0;
  return CompactBytes(r.slots, phase, block_tokens, window, layout.BytesPerToken());
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
  r = ParseLayerOffsets(layer, where);
  if (r.to != node.end || (window == 0 && r.from != node.start)) {
    Bad("{} covers [{}, {}), the node [{}, {})", where, r.from, r.to, node.start, node.end);
  }
  ParseLayerTensors(layer, layouts[l], window, where, tensors, r);
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
    r.tokens = Tokens(tokens, where);  // any int, as Commit accepts
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
  CheckAllUsed(tensors, "node");
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

LoadedTrie BuildTrie(const PromptState& s, const std::vector<NodeRecord>& nodes,
                     const ByteSource& source, std::uint64_t data_offset, Layouts layouts) {
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
        if (layer.present) VerifyLayer(layer, source, data_offset);
      }
      continue;
    }
    std::vector<std::unique_ptr<Snapshot>> snapshots(s.Layers());
    for (std::size_t l = 0; l < s.Layers(); ++l) {
      if (r.layers[l].present) {
        snapshots[l] = ImportLayer(r.layers[l], s.windows[l], s.block_tokens[l], source,
                                   data_offset, fmt::format("node {} layer {}", i, l));
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
