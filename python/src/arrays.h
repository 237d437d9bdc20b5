#pragma once
// numpy arrays <-> ringkv::Tensor. Inputs are borrowed (Tensor::Borrow), not
// copied; outputs are arrays over a Tensor's memory whose base object keeps that
// Tensor, and so its storage, alive.
//
// dtypes: float32 <-> f32, float16 <-> f16, uint16 <-> bf16 (numpy has no
// bfloat16: a bf16 tensor is its raw bits in a uint16 array, and a uint16 array
// is read as bf16).
//
// Every function here touches Python objects: call them with the GIL held.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>

#include "ringkv/dtype.h"
#include "ringkv/tensor.h"

namespace ringkv::python {

namespace py = pybind11;

// A numpy array seen as a Tensor. `owner` is the array the tensor reads (the
// caller's, or a copy of it), kept alive as long as this object is.
struct InputTensor {
  py::object owner;
  Tensor tensor;
};

// The array as a read-only tensor, without a copy: any rank up to 4, any
// strides that are non-negative multiples of the item size, float32 / float16 /
// uint16 (bf16). ringkv only reads inputs, so even a writeable array is borrowed
// read-only (which also admits numpy's zero-stride broadcasts). An array that
// cannot be borrowed as it is, with negative strides or misaligned elements
// (a view of packed bytes), is copied into a new C-contiguous array. Anything
// else (another dtype, a rank above 4, a non-native byte order, not an array)
// throws ringkv::Error naming `function`, `argument` and the values.
InputTensor ReadArray(const char* function, const char* argument, py::handle array);

// The array as a writable tensor over its own memory (for `out` arguments):
// it must be a writeable numpy array of `dtype` with non-negative strides that
// are multiples of the item size, aligned, rank <= 4, else ringkv::Error.
Tensor WriteArray(const char* function, const char* argument, py::handle array, DType dtype);

// An array over the tensor's elements (no copy) whose base keeps a copy of the
// tensor (sharing its storage) alive. Read-only unless `writeable`.
py::array ToArray(const Tensor& tensor, bool writeable);

// The numpy dtype for a ringkv dtype (bf16 -> uint16).
py::dtype NumpyDtype(DType dtype);

// A storage dtype argument: None -> nullopt; "f32" / "f16" / "bf16" (also
// "float32", "float16", "bfloat16"), "int8" / "int4" / "int4h" (quantized, by name only),
// or anything numpy.dtype() accepts that maps to a float one (float32, float16,
// uint16 for bf16). Else ringkv::Error naming `argument` and the value.
std::optional<DType> ParseDtype(const char* function, const char* argument, py::handle dtype);

}  // namespace ringkv::python
