#include "snapshots.h"

#include <fmt/format.h>

#include "register.h"
#include "ringkv/error.h"

namespace ringkv::python {

namespace {

[[noreturn]] void ThrowConsumed(const char* function, const char* kind) {
  throw Error(fmt::format(
      "[{}] this {} was consumed by a merge or split and holds nothing any more", function, kind));
}

}  // namespace

const Snapshot& PySnapshot::Get(const char* function) const {
  if (snapshot == nullptr) ThrowConsumed(function, "Snapshot");
  return *snapshot;
}

const LayerSnapshot& PyLayerSnapshot::Get(const char* function) const {
  if (snapshot == nullptr) ThrowConsumed(function, "LayerSnapshot");
  return *snapshot;
}

void RegisterSnapshots(py::module_& m) {
  py::class_<PySnapshot>(m, "Snapshot", "One cache's state from from_offset to to_offset.")
      .def_property_readonly(
          "size", [](const PySnapshot& s) { return s.Get("Snapshot.size").Size(); },
          "Bytes of K and V the snapshot covers (blocks are shared copy-on-write).")
      .def_property_readonly(
          "from_offset",
          [](const PySnapshot& s) { return s.Get("Snapshot.from_offset").FromOffset(); })
      .def_property_readonly(
          "to_offset", [](const PySnapshot& s) { return s.Get("Snapshot.to_offset").ToOffset(); })
      .def_property_readonly("consumed", [](const PySnapshot& s) { return s.snapshot == nullptr; })
      .def("__repr__", [](const PySnapshot& s) {
        if (s.snapshot == nullptr) return std::string("ringkv.Snapshot(consumed)");
        return fmt::format("ringkv.Snapshot(from_offset={}, to_offset={}, size={})",
                           s.snapshot->FromOffset(), s.snapshot->ToOffset(), s.snapshot->Size());
      });

  py::class_<PyLayerSnapshot>(m, "LayerSnapshot", "One snapshot per layer of a LayerCaches.")
      .def("__len__",
           [](const PyLayerSnapshot& s) { return s.Get("LayerSnapshot.__len__").Layers(); })
      .def_property_readonly(
          "size", [](const PyLayerSnapshot& s) { return s.Get("LayerSnapshot.size").Size(); })
      .def_property_readonly("consumed",
                             [](const PyLayerSnapshot& s) { return s.snapshot == nullptr; })
      .def(
          "layer",
          [](const PyLayerSnapshot& s, std::size_t i) -> py::object {
            const Snapshot* layer = s.Get("LayerSnapshot.layer").Layer(i);
            if (layer == nullptr) return py::none();
            return py::make_tuple(layer->FromOffset(), layer->ToOffset(), layer->Size());
          },
          py::arg("index"),
          "(from_offset, to_offset, size) of one layer's snapshot, or None when it has none.");
}

}  // namespace ringkv::python
