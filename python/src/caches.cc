#include "caches.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "arrays.h"
#include "history.h"
#include "register.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "snapshots.h"

namespace ringkv::python {

namespace {

AttentionCache& AsCache(LayerCaches::Layer& layer) {
  return std::visit([](auto& cache) -> AttentionCache& { return cache; }, layer);
}

// The C++ cache of a kind-specific Python method (the Python class guarantees
// the kind; a mismatch would be a binding bug, reported as an Error anyway).
template <class C>
C& As(const PyCache& self, const char* function) {
  auto* cache = dynamic_cast<C*>(&self.Get(function));
  if (cache == nullptr) throw Error(fmt::format("[{}] not a cache of this kind", function));
  return *cache;
}

std::optional<std::string> DtypeName(std::optional<DType> dtype) {
  if (!dtype) return std::nullopt;
  return std::string(ringkv::DTypeName(*dtype));
}

PyHistory Update(py::object self, py::handle keys, py::handle values) {
  constexpr const char* kFunction = "AttentionCache.update";
  AttentionCache& cache = self.cast<const PyCache&>().Get(kFunction);
  const InputTensor k = ReadArray(kFunction, "keys", keys);
  const InputTensor v = ReadArray(kFunction, "values", values);
  KVHistory history;
  {
    py::gil_scoped_release release;
    history = cache.Update(k.tensor, v.tensor);
  }
  return PyHistory{std::move(history), std::move(self)};
}

py::tuple State(const PyCache& self) {
  const KvView view = self.Get("AttentionCache.state").State();
  return py::make_tuple(KeysArray(view), ValuesArray(view));
}

py::object Snapshot(const PyCache& self, int from_offset) {
  std::unique_ptr<ringkv::Snapshot> snapshot =
      self.Get("AttentionCache.snapshot").Snapshot(from_offset);
  if (snapshot == nullptr) return py::none();
  return py::cast(PySnapshot{std::move(snapshot)});
}

bool Restore(const PyCache& self, const PySnapshot* snapshot, int target) {
  constexpr const char* kFunction = "AttentionCache.restore";
  AttentionCache& cache = self.Get(kFunction);
  const ringkv::Snapshot* s = snapshot == nullptr ? nullptr : &snapshot->Get(kFunction);
  py::gil_scoped_release release;
  return cache.Restore(s, target);
}

PySnapshot Merge(const PyCache& self, PySnapshot& parent, PySnapshot& child) {
  constexpr const char* kFunction = "AttentionCache.merge";
  AttentionCache& cache = self.Get(kFunction);
  parent.Get(kFunction);
  child.Get(kFunction);
  // Consumed only on success: after an Error both still hold their snapshots.
  return PySnapshot{cache.Merge(std::move(parent.snapshot), std::move(child.snapshot))};
}

py::tuple Split(const PyCache& self, PySnapshot& snapshot, int at) {
  constexpr const char* kFunction = "AttentionCache.split";
  AttentionCache& cache = self.Get(kFunction);
  snapshot.Get(kFunction);
  auto [first, second] = cache.Split(std::move(snapshot.snapshot), at);
  py::object head = first == nullptr ? py::none() : py::cast(PySnapshot{std::move(first)});
  return py::make_tuple(head, PySnapshot{std::move(second)});
}

std::string Repr(const PyCache& self, const char* kind) {
  try {
    const AttentionCache& cache = self.Get("repr");
    std::string extra;
    if (const auto* rotating = dynamic_cast<const RotatingKVCache*>(&cache)) {
      extra = fmt::format("max_size={}, ", rotating->MaxSize());
    }
    return fmt::format("ringkv.{}({}offset={}, dtype={})", kind, extra, cache.Offset(),
                       DtypeName(cache.StorageDtype()).value_or("None"));
  } catch (const Error&) {
    return fmt::format("ringkv.{}(gone)", kind);
  }
}

}  // namespace

AttentionCache& OwnedCache::Get(const char* function) {
  if (taken_) {
    throw Error(fmt::format(
        "[{}] this cache was taken over by a LayerCaches: use the LayerCaches' layer instead",
        function));
  }
  return AsCache(cache_);
}

LayerCaches::Layer OwnedCache::Take(const char* function) {
  Get(function);
  taken_ = true;
  return std::move(cache_);
}

py::object WrapCache(std::shared_ptr<CacheSource> source, AttentionCache& cache) {
  if (dynamic_cast<KVCache*>(&cache) != nullptr) return py::cast(PyKVCache(std::move(source)));
  if (dynamic_cast<RotatingKVCache*>(&cache) != nullptr) {
    return py::cast(PyRotatingKVCache(std::move(source)));
  }
  return py::cast(PyCache(std::move(source)));
}

void RegisterCaches(py::module_& m) {
  py::class_<PyCache>(m, "AttentionCache",
                      "What every cache does: a KVCache, a RotatingKVCache, a LayerCaches' layer "
                      "or a speculation's wrapper.")
      .def("update", &Update, py::arg("keys"), py::arg("values"),
           "Appends keys [1, Hkv, L, D] and values [1, Hkv, L, Dv] (float32, float16 or uint16 "
           "as bf16; any strides; read in place) and returns the History attention reads.")
      .def_property_readonly("state", &State,
                             "(keys, values): the stored tokens in storage order, read-only "
                             "arrays [1, Hkv, T, D] (views of the blocks when they are one run, "
                             "else copies); they keep the blocks alive, and show the cache as it "
                             "was until its next mutating call.")
      .def_property_readonly(
          "offset", [](const PyCache& c) { return c.Get("AttentionCache.offset").Offset(); })
      .def_property_readonly(
          "storage_dtype",
          [](const PyCache& c) {
            return DtypeName(c.Get("AttentionCache.storage_dtype").StorageDtype());
          })
      .def("snapshot", &Snapshot, py::arg("from_offset") = 0,
           "The state from from_offset to offset as a Snapshot (None when empty).")
      .def("restore", &Restore, py::arg("snapshot").none(true), py::arg("target"),
           "Brings the cache to target (a None snapshot: rewinds live state); False, with "
           "nothing changed, when target is unreachable.")
      .def("merge", &Merge, py::arg("parent"), py::arg("child"),
           "Combines snapshots [a, b) and [b, c) into [a, c); consumes both on success.")
      .def("split", &Split, py::arg("snapshot"), py::arg("at"),
           "Divides [a, c) at `at`: (Snapshot [a, at) or None, Snapshot [at, c)); consumes the "
           "input on success.")
      .def(
          "trim", [](const PyCache& c, int n) { return c.Get("AttentionCache.trim").Trim(n); },
          py::arg("n"), "Removes the last min(n, offset) tokens; returns that count, or 0.")
      .def(
          "rewind",
          [](const PyCache& c, int target) {
            return c.Get("AttentionCache.rewind").Rewind(target);
          },
          py::arg("target"))
      .def(
          "can_rewind",
          [](const PyCache& c, int target) {
            return c.Get("AttentionCache.can_rewind").CanRewind(target);
          },
          py::arg("target"))
      .def("free", [](const PyCache& c) { c.Get("AttentionCache.free").Free(); })
      .def("__repr__", [](const PyCache& c) { return Repr(c, "AttentionCache"); });

  py::class_<PyKVCache, PyCache>(m, "KVCache", "The full history of one attention layer.")
      .def(py::init([](std::int64_t block_tokens, py::handle dtype) {
             const std::optional<DType> storage = ParseDtype("KVCache", dtype);
             return PyKVCache(std::make_shared<OwnedCache>(KVCache(block_tokens, storage)));
           }),
           py::arg("block_tokens") = KVCache::kDefaultBlockTokens, py::arg("dtype") = py::none())
      .def(
          "view",
          [](py::object self) {
            const KVHistory history =
                As<KVCache>(self.cast<const PyCache&>(), "KVCache.view").View();
            return PyHistory{history, std::move(self)};
          },
          "The current history without writing.")
      .def("fork",
           [](const PyKVCache& c) {
             return PyKVCache(std::make_shared<OwnedCache>(As<KVCache>(c, "KVCache.fork").Fork()));
           })
      .def_property_readonly(
          "block_tokens",
          [](const PyKVCache& c) { return As<KVCache>(c, "KVCache.block_tokens").BlockTokens(); })
      .def_property_readonly(
          "nbytes",
          [](const PyKVCache& c) { return As<KVCache>(c, "KVCache.nbytes").AllocatedBytes(); })
      .def("__repr__", [](const PyKVCache& c) { return Repr(c, "KVCache"); });

  py::class_<PyRotatingKVCache, PyCache>(m, "RotatingKVCache",
                                         "A sliding window of max_size tokens (a ring).")
      .def(py::init([](int max_size, std::int64_t block_tokens, py::handle dtype) {
             const std::optional<DType> storage = ParseDtype("RotatingKVCache", dtype);
             return PyRotatingKVCache(
                 std::make_shared<OwnedCache>(RotatingKVCache(max_size, block_tokens, storage)));
           }),
           py::arg("max_size"), py::arg("block_tokens") = RotatingKVCache::kDefaultBlockTokens,
           py::arg("dtype") = py::none())
      .def(
          "view",
          [](py::object self) {
            const KVHistory history =
                As<RotatingKVCache>(self.cast<const PyCache&>(), "RotatingKVCache.view").View();
            return PyHistory{history, std::move(self)};
          },
          "The last max_size - 1 tokens in logical order, without writing.")
      .def("fork",
           [](const PyRotatingKVCache& c) {
             return PyRotatingKVCache(std::make_shared<OwnedCache>(
                 As<RotatingKVCache>(c, "RotatingKVCache.fork").Fork()));
           })
      .def_property_readonly("max_size",
                             [](const PyRotatingKVCache& c) {
                               return As<RotatingKVCache>(c, "RotatingKVCache.max_size").MaxSize();
                             })
      .def_property_readonly(
          "ring_index",
          [](const PyRotatingKVCache& c) {
            return As<RotatingKVCache>(c, "RotatingKVCache.ring_index").RingIndex();
          })
      .def_property_readonly(
          "block_tokens",
          [](const PyRotatingKVCache& c) {
            return As<RotatingKVCache>(c, "RotatingKVCache.block_tokens").BlockTokens();
          })
      .def_property_readonly(
          "nbytes",
          [](const PyRotatingKVCache& c) {
            return As<RotatingKVCache>(c, "RotatingKVCache.nbytes").AllocatedBytes();
          })
      .def("__repr__", [](const PyRotatingKVCache& c) { return Repr(c, "RotatingKVCache"); });
}

}  // namespace ringkv::python
