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
#include "storage.h"

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

// Python's own storage argument order; the C++ constructors take nullopt or a KvStorage.
template <class C, class... Leading>
C MakeCache(const char* function, py::handle dtype, py::handle key_dtype, py::handle value_dtype,
            Leading... leading) {
  const std::optional<KvStorage> storage = ParseStorage(function, dtype, key_dtype, value_dtype);
  if (!storage) return C(leading..., std::nullopt);
  return C(leading..., *storage);
}

std::optional<DType> KeyDtype(const AttentionCache& cache) {
  const std::optional<KvStorage> storage = cache.Storage();
  if (!storage) return std::nullopt;
  return storage->keys;
}

std::optional<DType> ValueDtype(const AttentionCache& cache) {
  const std::optional<KvStorage> storage = cache.Storage();
  if (!storage) return std::nullopt;
  return storage->values;
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

// "dtype=f16", "key_dtype=int8, value_dtype=int4" or "dtype=None".
std::string StorageRepr(const std::optional<KvStorage>& storage) {
  if (!storage) return "dtype=None";
  if (storage->keys == storage->values) {
    return fmt::format("dtype={}", ringkv::DTypeName(storage->keys));
  }
  return fmt::format("key_dtype={}, value_dtype={}", ringkv::DTypeName(storage->keys),
                     ringkv::DTypeName(storage->values));
}

std::string Repr(const PyCache& self, const char* kind) {
  try {
    const AttentionCache& cache = self.Get("repr");
    std::string extra;
    if (const auto* rotating = dynamic_cast<const RotatingKVCache*>(&cache)) {
      extra = fmt::format("max_size={}, ", rotating->MaxSize());
    }
    return fmt::format("ringkv.{}({}offset={}, {})", kind, extra, cache.Offset(),
                       StorageRepr(cache.Storage()));
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

constexpr const char* kStorageDoc =
    "dtype: what the blocks hold K and V in: 'f32', 'f16', 'bf16' (update converts any float "
    "input to it), 'int8' (one scale per token and head), 'int4' (one scale per group of 32 "
    "values; the head dim must be a multiple of 32) or 'int4h' (int4 of the rows rotated by an "
    "orthonormal Hadamard transform, which spreads outlier channels; the same bytes per token); "
    "None: the first update's input dtype. "
    "key_dtype / value_dtype set one side each (the other falls back to dtype), e.g. "
    "key_dtype='int8', value_dtype='int4'; a float side needs the other to be the same float. "
    "Quantized caches quantize on update; state, keys() and values() return float32 copies of "
    "the dequantised values.";

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
                             "was until its next mutating call. A quantized side comes back "
                             "as a float32 copy of the dequantised values (scale * q, rotated "
                             "back for int4h).")
      .def_property_readonly(
          "offset", [](const PyCache& c) { return c.Get("AttentionCache.offset").Offset(); })
      .def_property_readonly(
          "storage_dtype",
          [](const PyCache& c) {
            return DtypeName(c.Get("AttentionCache.storage_dtype").StorageDtype());
          },
          "The dtype the blocks hold K and V in ('f32', 'f16', 'bf16', 'int8', 'int4', 'int4h'); "
          "None when the first update decides, or when keys and values differ (see key_dtype).")
      .def_property_readonly(
          "key_dtype",
          [](const PyCache& c) { return DtypeName(KeyDtype(c.Get("AttentionCache.key_dtype"))); },
          "The dtype the blocks hold K in; None when the first update decides.")
      .def_property_readonly(
          "value_dtype",
          [](const PyCache& c) {
            return DtypeName(ValueDtype(c.Get("AttentionCache.value_dtype")));
          },
          "The dtype the blocks hold V in; None when the first update decides.")
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
      .def(py::init([](std::int64_t block_tokens, py::handle dtype, py::handle key_dtype,
                       py::handle value_dtype) {
             return PyKVCache(std::make_shared<OwnedCache>(
                 MakeCache<KVCache>("KVCache", dtype, key_dtype, value_dtype, block_tokens)));
           }),
           py::arg("block_tokens") = KVCache::kDefaultBlockTokens, py::arg("dtype") = py::none(),
           py::kw_only(), py::arg("key_dtype") = py::none(), py::arg("value_dtype") = py::none(),
           kStorageDoc)
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
      .def(py::init([](int max_size, std::int64_t block_tokens, py::handle dtype,
                       py::handle key_dtype, py::handle value_dtype) {
             return PyRotatingKVCache(std::make_shared<OwnedCache>(MakeCache<RotatingKVCache>(
                 "RotatingKVCache", dtype, key_dtype, value_dtype, max_size, block_tokens)));
           }),
           py::arg("max_size"), py::arg("block_tokens") = RotatingKVCache::kDefaultBlockTokens,
           py::arg("dtype") = py::none(), py::kw_only(), py::arg("key_dtype") = py::none(),
           py::arg("value_dtype") = py::none(), kStorageDoc)
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
