// PromptCache::Save / Load: the trie to and from a file (prompt_file.h).
#include <fmt/format.h>

#include "atomic_file.h"
#include "prompt_file.h"
#include "prompt_state.h"
#include "ringkv/error.h"
#include "ringkv/prompt_cache.h"

namespace ringkv {
namespace {

void Preorder(const detail::PromptNode& node, std::vector<const detail::PromptNode*>& out) {
  for (const auto& child : node.children) {
    out.push_back(child.get());
    Preorder(*child, out);
  }
}

void Write(const detail::PromptState& s, const std::string& path,
           std::span<const detail::PromptNode* const> nodes, const char* function) {
  std::vector<Tensor> tensors;
  const std::vector<std::byte> header = detail::EncodeHeader(s, nodes, tensors);
  std::vector<std::span<const std::byte>> parts = {header};
  for (const Tensor& t : tensors) {
    parts.emplace_back(static_cast<const std::byte*>(t.Data()), t.NumBytes());
  }
  detail::WriteFileAtomically(path, parts, function);
}

}  // namespace

void PromptCache::Save(const std::string& path) const {
  std::vector<const detail::PromptNode*> nodes;
  Preorder(*state_->root, nodes);
  Write(*state_, path, nodes, "PromptCache::Save");
}

void PromptCache::SaveEntry(const std::string& path, std::span<const int> tokens) const {
  const detail::TriePath trie_path = detail::Walk(*state_->root, tokens);
  std::vector<const detail::PromptNode*> nodes;
  for (const detail::PromptNode* node : trie_path.nodes) {
    if (node->end <= trie_path.matched) nodes.push_back(node);
  }
  if (nodes.empty()) {
    throw Error(fmt::format("[PromptCache::SaveEntry] no cached node lies within the {} tokens",
                            tokens.size()));
  }
  Write(*state_, path, nodes, "PromptCache::SaveEntry");
}

void PromptCache::Load(const std::string& path) {
  const std::vector<std::byte> file = detail::ReadWholeFile(path, "PromptCache::Load");
  LoadFromMemory(file);
}

void PromptCache::LoadFromMemory(std::span<const std::byte> file) {
  detail::PromptState& s = *state_;
  detail::LoadedTrie trie = detail::DecodeFile(s, file);
  detail::HeldBlocks pinned_blocks;
  std::vector<const detail::PromptNode*> nodes;
  Preorder(*trie.root, nodes);
  for (const detail::PromptNode* node : nodes) {
    if (node->pinned) pinned_blocks.Add(node->snapshot.get());
  }
  const std::size_t pinned = pinned_blocks.Bytes();
  if (pinned > s.options.byte_budget) {
    throw SnapshotError(fmt::format(
        "[PromptCache::Load] the file pins {} bytes of snapshots, over the budget of {}", pinned,
        s.options.byte_budget));
  }
  // Validated: install (nothing below throws).
  s.root = std::move(trie.root);
  s.layouts.swap(trie.layouts);
  s.pending.clear();
  s.held.Swap(trie.held);
  s.clock = std::max(s.clock, trie.clock);
  detail::EnforceBudget(s);
}

}  // namespace ringkv
