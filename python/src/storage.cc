#include "storage.h"

#include <fmt/format.h>

#include <string>

#include "arrays.h"
#include "ringkv/error.h"

namespace ringkv::python {

std::optional<KvStorage> ParseStorage(const char* function, py::handle dtype, py::handle key_dtype,
                                      py::handle value_dtype) {
  const std::optional<DType> both = ParseDtype(function, "dtype", dtype);
  std::optional<DType> keys = ParseDtype(function, "key_dtype", key_dtype);
  std::optional<DType> values = ParseDtype(function, "value_dtype", value_dtype);
  if (!keys) keys = both;
  if (!values) values = both;
  if (!keys && !values) return std::nullopt;
  if (!keys || !values) {
    // The C++ caches fix both sides at construction or let the first update
    // pick one dtype for both; there is no half-fixed storage.
    throw Error(fmt::format("[{}] {} {} is given but {} is not: give both (or dtype for the other)",
                            function, keys ? "key_dtype" : "value_dtype",
                            py::repr(keys ? key_dtype : value_dtype).cast<std::string>(),
                            keys ? "value_dtype" : "key_dtype"));
  }
  return KvStorage{*keys, *values};
}

py::object DtypeName(std::optional<DType> dtype) {
  if (!dtype) return py::none();
  return py::str(std::string(ringkv::DTypeName(*dtype)));
}

}  // namespace ringkv::python
