#pragma once
// ringkv.Speculation: speculative decoding as a context manager.

#include <pybind11/pybind11.h>

namespace ringkv::python {

namespace py = pybind11;

// A speculation over `caches`: a ringkv.LayerCaches, or a sequence of caches
// (None entries allowed, as in C++). Begun at once; the result is also a
// context manager (commits every draft on a normal exit, rolls back on an
// exception).
py::object Speculate(py::object caches);

}  // namespace ringkv::python
