// PromptCache::Save / Load: the trie to and from a file (prompt_file.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "file_frame.h"
#include "file_source.h"
#include "prompt_file.h"
#include "prompt_state.h"
#include "ringkv/error.h"
#include "ringkv/prompt_cache.h"

namespace ringkv {
namespace {

void Write(const detail::PromptState& s, const std::string& path,
           std::span<const detail::PromptNode* const> nodes, const char* function) {
  std::vector<detail::TensorBytes> tensors;
  std::vector<std::byte> header;
  try {
    header = detail::EncodeHeader(s, nodes, tensors, function);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("[{}] cannot encode the header: {}", function, e.what()));
  }
  // What Load would refuse is never written.
  const std::size_t limit = detail::MaxHeaderBytes(s.options.byte_budget);
  if (header.size() - 8 > limit) {
    throw Error(fmt::format(
        "[{}] the header takes {} bytes, over the limit of {} (max(16 MiB, byte_budget / 16)) "
        "that Load accepts: save fewer nodes (SaveEntry)",
        function, header.size() - 8, limit));
  }
  detail::WriteTensorFile(path, header, tensors, function);
}

void Install(detail::PromptState& s, detail::LoadedTrie trie) noexcept {
  s.root = std::move(trie.root);
  s.layouts.swap(trie.layouts);
  s.pending.clear();
  s.held.Swap(trie.held);
  s.clock = std::max(s.clock, trie.clock);
  // The old trie's snapshots (now in `trie`) are released on return.
}

}  // namespace

void PromptCache::Save(const std::string& path) const {
  const std::vector<detail::PromptNode*> nodes = detail::Preorder(*state_->root);
  Write(*state_, path, {nodes.begin(), nodes.end()}, "PromptCache::Save");
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
  const detail::FileSource file(path, "PromptCache::Load");
  detail::PromptState& s = *state_;
  Install(s, detail::DecodeFile(s, file));
  detail::EnforceBudget(s);
}

void PromptCache::LoadFromMemory(std::span<const std::byte> file) {
  detail::PromptState& s = *state_;
  Install(s, detail::DecodeFile(s, detail::MemorySource(file)));
  detail::EnforceBudget(s);
}

}  // namespace ringkv
