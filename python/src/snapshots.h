#pragma once
// ringkv.Snapshot and ringkv.LayerSnapshot: caller-owned snapshots. merge and
// split consume their inputs on success (as in C++); a consumed snapshot raises
// ringkv.Error when used.

#include <memory>

#include "ringkv/layer_caches.h"
#include "ringkv/snapshot.h"

namespace ringkv::python {

struct PySnapshot {
  std::unique_ptr<Snapshot> snapshot;  // null once consumed
  // The snapshot, or ringkv::Error naming `function` when it was consumed.
  const Snapshot& Get(const char* function) const;
};

struct PyLayerSnapshot {
  std::unique_ptr<LayerSnapshot> snapshot;  // null once consumed
  const LayerSnapshot& Get(const char* function) const;
};

}  // namespace ringkv::python
