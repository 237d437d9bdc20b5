#pragma once
// ringkv.History: what update() / view() return. It keeps the Python cache
// object alive; the C++ stale-view check makes it raise ringkv.Error once the
// cache has changed, instead of reading memory that moved.

#include <pybind11/pybind11.h>

#include "ringkv/kv_history.h"

namespace ringkv::python {

namespace py = pybind11;

struct PyHistory {
  KVHistory history;
  py::object cache;  // the Python cache it came from
};

// A read-only array of a view's keys or values: a view of the storage block
// when the view is one run (no copy), else a contiguous copy; a quantized side
// (int8 / int4) is always a float32 copy of the dequantised values. Throws
// ringkv::Error when the view is stale.
py::object KeysArray(const KvView& view);
py::object ValuesArray(const KvView& view);

}  // namespace ringkv::python
