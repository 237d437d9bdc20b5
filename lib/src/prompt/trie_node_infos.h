#pragma once
// The Nodes() listing both prompt caches give (PromptCache, SequencePromptCache):
// the trie in pre-order, each node's parent named by its index in the list. What
// only the cache knows (bytes, active path, missing windows) its `fill` adds.

#include <unordered_map>
#include <utility>
#include <vector>

#include "ringkv/prompt_cache.h"
#include "token_trie.h"

namespace ringkv::detail {

// `fill(const Node&, PromptNodeInfo&)` completes each entry after the trie's fields.
template <class Node, class Fill>
std::vector<PromptNodeInfo> TrieNodeInfos(const Node& root, Fill fill) {
  const std::vector<Node*> nodes = TriePreorder(root);
  std::unordered_map<const Node*, int> index;
  index.reserve(nodes.size());
  std::vector<PromptNodeInfo> out;
  out.reserve(nodes.size());
  for (const Node* node : nodes) {
    PromptNodeInfo info;
    const auto parent = index.find(node->parent);
    info.parent = parent == index.end() ? -1 : parent->second;
    info.start = node->start;
    info.end = node->end;
    info.tokens = node->tokens;
    info.last_used = node->last_used;
    info.pinned = node->pinned;
    fill(*node, info);
    index.emplace(node, static_cast<int>(out.size()));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace ringkv::detail
