#include "layer_caches.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "caches.h"
#include "register.h"
#include "ringkv/error.h"
#include "snapshots.h"
#include "speculation.h"
#include "storage.h"

namespace ringkv::python {

namespace {

// Layer `index` of a LayerCaches, looked up at every use.
class LayerSource final : public CacheSource {
 public:
  LayerSource(std::shared_ptr<LayerCaches> caches, std::size_t index)
      : caches_(std::move(caches)), index_(index) {}
  AttentionCache& Get(const char* function) override {
    if (index_ >= caches_->Size()) {
      throw Error(fmt::format("[{}] layer {} is past the LayerCaches' {} layers", function, index_,
                              caches_->Size()));
    }
    return (*caches_)[index_];
  }

 private:
  std::shared_ptr<LayerCaches> caches_;
  std::size_t index_;
};

// Takes the caches over, all or none: every element is checked (a ringkv.KVCache
// or RotatingKVCache of its own, not taken, not listed twice) before any moves.
PyLayerCaches FromCaches(const py::sequence& layers) {
  constexpr const char* kFunction = "LayerCaches";
  std::vector<OwnedCache*> owned;
  std::set<const CacheSource*> seen;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    py::object item = layers[i];
    auto* source = py::isinstance<PyCache>(item)
                       ? dynamic_cast<OwnedCache*>(item.cast<const PyCache&>().Source().get())
                       : nullptr;
    if (source == nullptr) {
      throw Error(
          fmt::format("[{}] layers[{}] is a {}, not a ringkv.KVCache or RotatingKVCache of its own",
                      kFunction, i, Py_TYPE(item.ptr())->tp_name));
    }
    source->Get(kFunction);  // taken already: refused by name
    if (!seen.insert(source).second) {
      throw Error(fmt::format("[{}] layers[{}] appears twice in the list", kFunction, i));
    }
    owned.push_back(source);
  }
  std::vector<LayerCaches::Layer> taken;
  taken.reserve(owned.size());
  for (OwnedCache* source : owned) taken.push_back(source->Take(kFunction));
  return PyLayerCaches{std::make_shared<LayerCaches>(std::move(taken))};
}

std::size_t Index(const PyLayerCaches& self, std::int64_t index) {
  const auto size = static_cast<std::int64_t>(self.caches->Size());
  const std::int64_t i = index < 0 ? index + size : index;
  if (i < 0 || i >= size) {
    throw py::index_error(fmt::format("layer {} is out of range for {} layers", index, size));
  }
  return static_cast<std::size_t>(i);
}

py::object Layer(const PyLayerCaches& self, std::int64_t index) {
  const std::size_t i = Index(self, index);
  auto source = std::make_shared<LayerSource>(self.caches, i);
  AttentionCache& cache = (*self.caches)[i];
  return WrapCache(std::move(source), cache);
}

const LayerSnapshot* SnapshotArg(const char* function, const PyLayerSnapshot* snapshot) {
  return snapshot == nullptr ? nullptr : &snapshot->Get(function);
}

// LayerCaches::Interleaved for any storage (none, one dtype, or K and V apart).
LayerCaches Interleaved(int layers, int global_every, int window, std::int64_t block_tokens,
                        const std::optional<KvStorage>& storage) {
  if (!storage || storage->keys == storage->values) {
    return LayerCaches::Interleaved(layers, global_every, window, block_tokens,
                                    storage ? std::optional<DType>(storage->keys) : std::nullopt);
  }
  return LayerCaches::Interleaved(layers, global_every, window, block_tokens, *storage);
}

std::size_t AllocatedBytes(const LayerCaches& caches) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < caches.Size(); ++i) {
    const AttentionCache& layer = caches[i];
    if (const auto* kv = dynamic_cast<const KVCache*>(&layer)) bytes += kv->AllocatedBytes();
    if (const auto* ring = dynamic_cast<const RotatingKVCache*>(&layer)) {
      bytes += ring->AllocatedBytes();
    }
  }
  return bytes;
}

}  // namespace

void RegisterLayerCaches(py::module_& m) {
  py::class_<PyLayerCaches>(
      m, "LayerCaches",
      "One cache per layer of a model. LayerCaches([cache, ...]) takes the caches over (they "
      "move into it, as in C++): the objects passed in raise ringkv.Error afterwards; use "
      "caches[i]. Joint operations act on every layer or none.")
      .def(py::init(&FromCaches), py::arg("layers"))
      .def_static(
          "interleaved",
          [](int layers, int global_every, int window, std::int64_t block_tokens, py::handle dtype,
             py::handle key_dtype, py::handle value_dtype) {
            const std::optional<KvStorage> storage =
                ParseStorage("LayerCaches.interleaved", dtype, key_dtype, value_dtype);
            return PyLayerCaches{std::make_shared<LayerCaches>(
                Interleaved(layers, global_every, window, block_tokens, storage))};
          },
          py::arg("layers"), py::arg("global_every"), py::arg("window"),
          py::arg("block_tokens") = KVCache::kDefaultBlockTokens, py::arg("dtype") = py::none(),
          py::kw_only(), py::arg("key_dtype") = py::none(), py::arg("value_dtype") = py::none(),
          "Layer i is a KVCache when (i + 1) % global_every == 0, else a "
          "RotatingKVCache(window). dtype, key_dtype, value_dtype: every layer's storage, as in "
          "KVCache.")
      .def("__len__", [](const PyLayerCaches& c) { return c.caches->Size(); })
      .def("__getitem__", &Layer, py::arg("index"))
      .def_property_readonly("offset", [](const PyLayerCaches& c) { return c.caches->Offset(); })
      .def_property_readonly("offsets", [](const PyLayerCaches& c) { return c.caches->Offsets(); })
      .def_property_readonly("nbytes",
                             [](const PyLayerCaches& c) { return AllocatedBytes(*c.caches); })
      .def(
          "snapshot",
          [](const PyLayerCaches& c, int from_offset) -> py::object {
            std::unique_ptr<LayerSnapshot> snapshot = c.caches->Snapshot(from_offset);
            if (snapshot == nullptr) return py::none();
            return py::cast(PyLayerSnapshot{std::move(snapshot)});
          },
          py::arg("from_offset") = 0)
      .def(
          "restore",
          [](const PyLayerCaches& c, const PyLayerSnapshot* snapshot, int target) {
            const LayerSnapshot* s = SnapshotArg("LayerCaches.restore", snapshot);
            py::gil_scoped_release release;
            return c.caches->Restore(s, target);
          },
          py::arg("snapshot").none(true), py::arg("target"))
      .def(
          "merge",
          [](const PyLayerCaches& c, PyLayerSnapshot& parent, PyLayerSnapshot& child) {
            parent.Get("LayerCaches.merge");
            child.Get("LayerCaches.merge");
            return PyLayerSnapshot{
                c.caches->Merge(std::move(parent.snapshot), std::move(child.snapshot))};
          },
          py::arg("parent"), py::arg("child"))
      .def(
          "split",
          [](const PyLayerCaches& c, PyLayerSnapshot& snapshot, int at) {
            snapshot.Get("LayerCaches.split");
            auto [first, second] = c.caches->Split(std::move(snapshot.snapshot), at);
            py::object head =
                first == nullptr ? py::none() : py::cast(PyLayerSnapshot{std::move(first)});
            return py::make_tuple(head, PyLayerSnapshot{std::move(second)});
          },
          py::arg("snapshot"), py::arg("at"))
      .def(
          "trim", [](const PyLayerCaches& c, int n) { return c.caches->Trim(n); }, py::arg("n"))
      .def(
          "rewind", [](const PyLayerCaches& c, int target) { return c.caches->Rewind(target); },
          py::arg("target"))
      .def(
          "can_rewind",
          [](const PyLayerCaches& c, int target) { return c.caches->CanRewind(target); },
          py::arg("target"))
      .def("free", [](const PyLayerCaches& c) { c.caches->Free(); })
      .def("speculate", &Speculate,
           "Begins a speculation over every layer: use it as `with caches.speculate() as spec:`.")
      .def("__repr__", [](const PyLayerCaches& c) {
        return fmt::format("ringkv.LayerCaches(layers={}, offsets=[{}])", c.caches->Size(),
                           fmt::join(c.caches->Offsets(), ", "));
      });
}

}  // namespace ringkv::python
