#pragma once
// One Register<Part> per source file; module.cc calls them in dependency order
// (a class must be registered before a signature names it).

#include <pybind11/pybind11.h>

namespace ringkv::python {

namespace py = pybind11;

void RegisterErrors(py::module_& m);
void RegisterContext(py::module_& m);
void RegisterSnapshots(py::module_& m);
void RegisterHistory(py::module_& m);
void RegisterCaches(py::module_& m);
void RegisterLayerCaches(py::module_& m);
void RegisterSpeculation(py::module_& m);
void RegisterAttention(py::module_& m);
#ifdef RINGKV_PYTHON_PROMPT_CACHE
void RegisterPromptCache(py::module_& m);
#endif

}  // namespace ringkv::python
