#include "history.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "arrays.h"
#include "register.h"
#include "ringkv/error.h"

namespace ringkv::python {

namespace {

py::object ViewArray(const KvView& view, bool keys) {
  // Quantized rows (data then scales) are no numpy dtype: an array over them
  // would be a wrong view of raw bytes, so they come back dequantised.
  if (IsQuantized(keys ? view.KeyDtype() : view.ValueDtype())) {
    return ToArray(keys ? view.ConcatKeys() : view.ConcatValues(), /*writeable=*/false);
  }
  const std::vector<Tensor> segments = keys ? view.KeySegments() : view.ValueSegments();
  if (segments.size() == 1) return ToArray(segments.front(), /*writeable=*/false);
  if (segments.empty()) {
    const std::int64_t dim = keys ? view.KeyDim() : view.ValueDim();
    py::array empty(NumpyDtype(view.Dtype()),
                    std::vector<py::ssize_t>{1, static_cast<py::ssize_t>(view.Heads()), 0,
                                             static_cast<py::ssize_t>(dim)});
    empty.attr("setflags")(py::arg("write") = false);
    return empty;
  }
  return ToArray(keys ? view.ConcatKeys() : view.ConcatValues(), /*writeable=*/false);
}

}  // namespace

py::object KeysArray(const KvView& view) { return ViewArray(view, true); }
py::object ValuesArray(const KvView& view) { return ViewArray(view, false); }

void RegisterHistory(py::module_& m) {
  py::class_<PyHistory>(
      m, "History",
      "The keys and values a cache's update() returned, in storage order, for attention().\n"
      "Valid until the cache's next mutating call (update, restore, trim, free, ...); after it,\n"
      "every use raises ringkv.Error.")
      .def("__len__",
           [](const PyHistory& h) { return static_cast<py::ssize_t>(h.history.Kv().Length()); })
      .def(
          "keys", [](const PyHistory& h) { return KeysArray(h.history.Kv()); },
          "[1, Hkv, K, D], read-only: a view of the cache's block when the history is one run, "
          "else a copy; an int8 / int4 cache gives a float32 copy of the dequantised keys.")
      .def(
          "values", [](const PyHistory& h) { return ValuesArray(h.history.Kv()); },
          "[1, Hkv, K, Dv], read-only (as keys()).")
      .def_readonly("cache", &PyHistory::cache)
      .def("__repr__", [](const PyHistory& h) {
        try {
          return fmt::format("ringkv.History(len={})", h.history.Kv().Length());
        } catch (const Error&) {
          return std::string("ringkv.History(stale)");
        }
      });
}

}  // namespace ringkv::python
