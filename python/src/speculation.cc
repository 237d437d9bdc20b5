#include "speculation.h"

#include <fmt/format.h>

#include <climits>
#include <memory>
#include <optional>
#include <vector>

#include "caches.h"
#include "layer_caches.h"
#include "register.h"
#include "ringkv/error.h"
#include "ringkv/speculation.h"

namespace ringkv::python {

namespace {

struct SpeculationState {
  // Declared first, destroyed last: the Python objects that own the live caches
  // outlive the speculation, whose destructor rolls them back.
  py::object caches;
  std::optional<Speculation> speculation;  // empty once rolled back
  std::vector<bool> present;               // per layer: false where None was given
  bool ended = false;                      // committed or rolled back
};

// Layer `index` of a speculation: its wrapper, while the speculation is open.
class SpeculationSource final : public CacheSource {
 public:
  SpeculationSource(std::shared_ptr<SpeculationState> state, std::size_t index)
      : state_(std::move(state)), index_(index) {}
  AttentionCache& Get(const char* function) override {
    if (state_->ended) {
      throw Error(fmt::format(
          "[{}] the speculation has ended (committed or rolled back): its caches take no more "
          "drafts; use the live caches",
          function));
    }
    AttentionCache* cache = state_->speculation->Caches()[index_];
    if (cache == nullptr) {
      throw Error(fmt::format("[{}] layer {} of the speculation has no cache", function, index_));
    }
    return *cache;
  }

 private:
  std::shared_ptr<SpeculationState> state_;
  std::size_t index_;
};

struct PySpeculation {
  std::shared_ptr<SpeculationState> state;

  std::size_t Size() const { return state->present.size(); }
  py::object Layer(std::int64_t index) const;
  void Commit(int n);
  void Rollback() noexcept {
    state->speculation.reset();  // its destructor rolls every layer back
    state->ended = true;
  }
};

py::object PySpeculation::Layer(std::int64_t index) const {
  const auto size = static_cast<std::int64_t>(Size());
  const std::int64_t i = index < 0 ? index + size : index;
  if (i < 0 || i >= size) {
    throw py::index_error(fmt::format("layer {} is out of range for {} layers", index, size));
  }
  if (!state->present[static_cast<std::size_t>(i)]) return py::none();
  // A wrapper is neither a KVCache nor a RotatingKVCache: an AttentionCache, which
  // raises ringkv.Error once the speculation has ended.
  return py::cast(PyCache(std::make_shared<SpeculationSource>(state, static_cast<std::size_t>(i))));
}

void PySpeculation::Commit(int n) {
  if (state->ended) {
    throw Error(fmt::format("[Speculation.commit] the speculation has already ended"));
  }
  {
    py::gil_scoped_release release;
    state->speculation->Commit(n);
  }
  state->ended = true;
}

std::vector<AttentionCache*> CachesOf(const py::object& caches) {
  constexpr const char* kFunction = "speculate";
  if (py::isinstance<PyLayerCaches>(caches)) return caches.cast<PyLayerCaches&>().caches->Caches();
  if (!py::isinstance<py::sequence>(caches)) {
    throw Error(
        fmt::format("[{}] caches must be a ringkv.LayerCaches or a sequence of caches, got {}",
                    kFunction, Py_TYPE(caches.ptr())->tp_name));
  }
  std::vector<AttentionCache*> result;
  const auto sequence = py::reinterpret_borrow<py::sequence>(caches);
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    py::object item = sequence[i];
    if (item.is_none()) {
      result.push_back(nullptr);
    } else if (py::isinstance<PyCache>(item)) {
      result.push_back(&item.cast<const PyCache&>().Get(kFunction));
    } else {
      throw Error(fmt::format("[{}] caches[{}] is a {}, not a ringkv cache or None", kFunction, i,
                              Py_TYPE(item.ptr())->tp_name));
    }
  }
  return result;
}

}  // namespace

py::object Speculate(py::object caches) {
  std::vector<AttentionCache*> layers = CachesOf(caches);
  auto state = std::make_shared<SpeculationState>();
  if (py::isinstance<PyLayerCaches>(caches)) {
    state->caches = caches;
  } else {
    // A tuple of the items: the list the caller passed may change afterwards.
    state->caches = py::tuple(caches);
  }
  state->speculation.emplace(BeginSpeculation(layers));
  for (const AttentionCache* layer : layers) state->present.push_back(layer != nullptr);
  return py::cast(PySpeculation{std::move(state)});
}

void RegisterSpeculation(py::module_& m) {
  py::class_<PySpeculation>(
      m, "Speculation",
      "Speculative decoding over a model's caches (LayerCaches.speculate() or "
      "ringkv.speculate(caches)). Run the draft forward through spec[i] / spec.caches, then "
      "commit(n) to keep the first n drafted tokens. As a context manager: leaving the block "
      "normally without commit() keeps every drafted token; leaving it by an exception rolls "
      "every layer back. A speculation dropped without commit() rolls back too.")
      .def("__len__", &PySpeculation::Size)
      .def("__getitem__", &PySpeculation::Layer, py::arg("index"))
      .def_property_readonly("caches",
                             [](const PySpeculation& s) {
                               py::list caches;
                               for (std::size_t i = 0; i < s.Size(); ++i) {
                                 caches.append(s.Layer(static_cast<std::int64_t>(i)));
                               }
                               return caches;
                             })
      .def_property_readonly("active", [](const PySpeculation& s) { return !s.state->ended; })
      .def("commit", &PySpeculation::Commit, py::arg("n"),
           "Keeps the first n drafted tokens (clamped to [0, drafted]) and ends the speculation.")
      .def("rollback", &PySpeculation::Rollback,
           "Drops every drafted token and ends the speculation.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySpeculation& s, py::handle exc_type, py::handle, py::handle) {
        if (s.state->ended) return false;
        if (!exc_type.is_none()) {
          s.Rollback();
          return false;
        }
        try {
          s.Commit(INT_MAX);  // clamped to the drafted count
        } catch (...) {
          s.Rollback();  // e.g. layers that drafted different counts
          throw;
        }
        return false;
      });
  m.def("speculate", &Speculate, py::arg("caches"),
        "Begins a speculation over a LayerCaches or a sequence of caches.");
}

}  // namespace ringkv::python
