#pragma once
// A cache constructor's storage arguments, dtype / key_dtype / value_dtype, as
// the C++ KvStorage, and its dtypes back as Python names.

#include <pybind11/pybind11.h>

#include <optional>

#include "ringkv/kv_storage.h"

namespace ringkv::python {

namespace py = pybind11;

// keys = key_dtype, else dtype; values = value_dtype, else dtype (each parsed
// by ParseDtype). nullopt when all three are None (the first update decides).
// One side set and the other not (key_dtype without value_dtype or dtype)
// throws ringkv::Error naming `function`: a cache fixes both sides or neither.
// Which pairs a cache accepts is the C++ constructor's rule (kv_storage.h).
std::optional<KvStorage> ParseStorage(const char* function, py::handle dtype, py::handle key_dtype,
                                      py::handle value_dtype);

// "f32", "f16", "bf16", "int8", "int4" or "int4h"; None for nullopt.
py::object DtypeName(std::optional<DType> dtype);

}  // namespace ringkv::python
