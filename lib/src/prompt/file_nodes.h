#pragma once
// The node list of a prompt cache file, in three steps, so that loading is
// linear in the file and never holds much more than the budget:
//   1. ParseNodes checks every node's metadata (structure, tokens, layers,
//      tensor names and shapes) into compact records; no tensor byte is read.
//   2. PlanWithinBudget chooses the nodes to keep: every pinned node (they must
//      fit), then whole paths by recency (the subtree holding the most recently
//      used node first), while the predicted bytes fit the budget.
//   3. BuildTrie reads each tensor once and checks its checksum; it imports
//      only the kept nodes' (a dropped node's are read in bounded chunks: its
//      metadata, ring invariants included, was checked in step 1). So a file
//      loads or is refused whatever the budget.

#include <cstdint>
#include <memory>
#include <vector>

#include "file_layer.h"
#include "file_source.h"
#include "file_tensors.h"
#include "prompt_file.h"
#include "prompt_state.h"

namespace ringkv::detail {

struct NodeRecord {
  int parent = -1;  // index of an earlier record, -1 for the root
  int start = 0;
  int end = 0;
  std::vector<int> tokens;
  bool pinned = false;
  std::uint64_t last_used = 0;
  std::vector<LayerRecord> layers;
  std::size_t bytes = 0;  // the blocks its snapshots will hold (span_storage.h)
  bool keep = false;
};

std::vector<NodeRecord> ParseNodes(const PromptState& s, const Layouts& layouts, const json& nodes,
                                   TensorTable& tensors);
// Throws when the pinned nodes alone exceed the budget.
void PlanWithinBudget(std::vector<NodeRecord>& nodes, std::size_t budget);
LoadedTrie BuildTrie(const PromptState& s, const std::vector<NodeRecord>& nodes,
                     const ByteSource& source, std::uint64_t data_offset, Layouts layouts);

}  // namespace ringkv::detail
