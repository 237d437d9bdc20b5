#pragma once
// ringkv.LayerCaches: one cache per layer of a model, managed together. The
// Python object shares ownership of the C++ LayerCaches with the layer objects
// it hands out (caches[i]) and with open speculations.

#include <memory>

#include "ringkv/layer_caches.h"

namespace ringkv::python {

struct PyLayerCaches {
  std::shared_ptr<LayerCaches> caches;  // never null
};

}  // namespace ringkv::python
