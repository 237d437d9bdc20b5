// ringkv::Error and its subclasses as Python exceptions with the C++ message:
// ringkv.Error (a RuntimeError), ringkv.ShapeError and ringkv.SnapshotError
// (subclasses of ringkv.Error, as in C++).

#include "register.h"
#include "ringkv/error.h"

namespace ringkv::python {

namespace {

// A new exception type named ringkv.<name> (the public package, not the
// extension module), set on `m`. Never released, so that no reference is
// dropped after the interpreter has finalised.
PyObject* NewException(py::module_& m, const char* name, PyObject* base) {
  const std::string full_name = std::string("ringkv.") + name;
  PyObject* type = PyErr_NewException(full_name.c_str(), base, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  static PyObject* const error = NewException(m, "Error", PyExc_RuntimeError);
  static PyObject* const shape_error = NewException(m, "ShapeError", error);
  static PyObject* const snapshot_error = NewException(m, "SnapshotError", error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error, e.what());
    } catch (const SnapshotError& e) {
      PyErr_SetString(snapshot_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    }
  });
}

}  // namespace ringkv::python
