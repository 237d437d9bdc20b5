#pragma once
// The token trie's structure, shared by both prompt caches (PromptCache over one
// LayerCaches, SequencePromptCache over a pool of sequences): walking a request
// down the edges, listing nodes without recursion, and tearing a subtree down
// without recursion (a decode loop committing every step builds chains of
// millions of nodes, deeper than any stack).
//
// A Node has `std::vector<int> tokens` (its edge, never empty below the root)
// and `std::vector<std::unique_ptr<Node>> children` whose edges start with
// distinct tokens.

#include <cstddef>
#include <gsl/narrow>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace ringkv::detail {

// Where `tokens` leads: the nodes entered (the last one possibly only partly
// matched) and the matched length.
template <class Node>
struct TriePathOf {
  std::vector<Node*> nodes;
  int matched = 0;
};

template <class Node>
TriePathOf<Node> WalkTrie(const Node& root, std::span<const int> tokens) {
  TriePathOf<Node> path;
  const Node* node = &root;
  std::size_t pos = 0;
  while (pos < tokens.size()) {
    const Node* next = nullptr;
    for (const auto& child : node->children) {
      if (child->tokens.front() == tokens[pos]) next = child.get();
    }
    if (next == nullptr) break;
    std::size_t k = 0;
    while (k < next->tokens.size() && pos + k < tokens.size() && next->tokens[k] == tokens[pos + k])
      ++k;
    // The trie hands out mutable nodes to its owner; a const root only means
    // the walk itself changes nothing.
    path.nodes.push_back(const_cast<Node*>(next));
    pos += k;
    if (k < next->tokens.size()) break;
    node = next;
  }
  path.matched = gsl::narrow<int>(pos);
  return path;
}

// Nodes below `root` with their depth (1 for root's children), in pre-order
// (parents before children).
template <class Node>
std::vector<std::pair<Node*, int>> TrieWithDepths(const Node& root) {
  std::vector<std::pair<Node*, int>> out;
  std::vector<std::pair<Node*, int>> stack;
  for (auto it = root.children.rbegin(); it != root.children.rend(); ++it) {
    stack.emplace_back(it->get(), 1);
  }
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    out.emplace_back(node, depth);
    for (auto it = node->children.rbegin(); it != node->children.rend(); ++it) {
      stack.emplace_back(it->get(), depth + 1);
    }
  }
  return out;
}

template <class Node>
std::vector<Node*> TriePreorder(const Node& root) {
  std::vector<Node*> out;
  for (const auto& [node, depth] : TrieWithDepths(root)) out.push_back(node);
  return out;
}

// Destroys `children` and their subtrees, each node childless when it dies.
// For a node's destructor: `DestroySubtrees(std::move(children))`.
template <class Node>
void DestroySubtrees(std::vector<std::unique_ptr<Node>> doomed) {
  while (!doomed.empty()) {
    std::unique_ptr<Node> node = std::move(doomed.back());
    doomed.pop_back();
    if (node == nullptr) continue;  // moved out (a merge hands the child over)
    for (auto& child : node->children) doomed.push_back(std::move(child));
    node->children.clear();
  }
}

template <class Node>
std::size_t ChildIndexOf(const Node& parent, const Node& child) noexcept {
  for (std::size_t i = 0; i < parent.children.size(); ++i) {
    if (parent.children[i].get() == &child) return i;
  }
  return parent.children.size();
}

}  // namespace ringkv::detail
