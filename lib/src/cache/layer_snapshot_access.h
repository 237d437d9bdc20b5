#pragma once
// Per-layer moves inside a LayerSnapshot, for the prompt cache (it moves
// sliding-window snapshots between trie nodes); not part of the public API.

#include <cstddef>
#include <gsl/assert>
#include <memory>
#include <utility>

#include "ringkv/layer_caches.h"

namespace ringkv::detail {

class LayerSnapshotAccess {
 public:
  // Hands one layer's snapshot over, leaving none there. layer < Layers().
  static std::unique_ptr<Snapshot> Release(LayerSnapshot& snapshot, std::size_t layer) {
    Expects(layer < snapshot.layers_.size());
    return std::move(snapshot.layers_[layer]);
  }
  // Replaces one layer's snapshot (null: none). layer < Layers().
  static void Reset(LayerSnapshot& snapshot, std::size_t layer,
                    std::unique_ptr<Snapshot> layer_snapshot) {
    Expects(layer < snapshot.layers_.size());
    snapshot.layers_[layer] = std::move(layer_snapshot);
  }
};

}  // namespace ringkv::detail
