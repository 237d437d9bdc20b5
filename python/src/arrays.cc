#include "arrays.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringkv/error.h"

namespace ringkv::python {

namespace {

std::string TypeName(py::handle object) { return Py_TYPE(object.ptr())->tp_name; }

std::string DtypeText(const py::dtype& dtype) {
  return py::str(py::handle(dtype.ptr())).cast<std::string>();
}

// The ringkv dtype of a numpy dtype, exactly (byte order included).
std::optional<DType> FromNumpy(const py::dtype& dtype) {
  if (dtype.equal(py::dtype("float32"))) return DType::kF32;
  if (dtype.equal(py::dtype("float16"))) return DType::kF16;
  if (dtype.equal(py::dtype("uint16"))) return DType::kBF16;
  return std::nullopt;
}

py::array AsArray(const char* function, const char* argument, py::handle object) {
  if (!py::isinstance<py::array>(object)) {
    throw Error(
        fmt::format("[{}] {} must be a numpy array, got {}", function, argument, TypeName(object)));
  }
  auto array = py::reinterpret_borrow<py::array>(object);
  if (array.ndim() > Shape::kMaxRank) {
    throw Error(fmt::format("[{}] {} has rank {}, more than {}", function, argument, array.ndim(),
                            Shape::kMaxRank));
  }
  return array;
}

DType DtypeOf(const char* function, const char* argument, const py::array& array) {
  const std::optional<DType> dtype = FromNumpy(array.dtype());
  if (!dtype) {
    throw Error(fmt::format("[{}] {} has dtype {}, not float32, float16 or uint16 (bf16)", function,
                            argument, DtypeText(array.dtype())));
  }
  return *dtype;
}

// Whether Tensor::Borrow can take the array as it is: element strides (bytes a
// non-negative multiple of the item size) and aligned elements.
bool Borrowable(const py::array& array) {
  const auto item = array.itemsize();
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    const py::ssize_t stride = array.strides(axis);
    if (stride < 0 || stride % item != 0) return false;
  }
  return reinterpret_cast<std::uintptr_t>(array.data()) % static_cast<std::uintptr_t>(item) == 0;
}

Shape ShapeOf(const py::array& array) {
  std::array<std::int64_t, Shape::kMaxRank> d{};
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    d[static_cast<std::size_t>(axis)] = array.shape(axis);
  }
  switch (array.ndim()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{d[0]};
    case 2:
      return Shape{d[0], d[1]};
    case 3:
      return Shape{d[0], d[1], d[2]};
    default:
      return Shape{d[0], d[1], d[2], d[3]};
  }
}

std::vector<std::int64_t> ElementStrides(const py::array& array) {
  std::vector<std::int64_t> strides;
  for (py::ssize_t axis = 0; axis < array.ndim(); ++axis) {
    strides.push_back(array.strides(axis) / array.itemsize());
  }
  return strides;
}

}  // namespace

InputTensor ReadArray(const char* function, const char* argument, py::handle object) {
  py::array array = AsArray(function, argument, object);
  const DType dtype = DtypeOf(function, argument, array);
  if (!Borrowable(array)) {
    // np.array copies always (ascontiguousarray would keep a misaligned but
    // contiguous array as it is); the copy is aligned and C-contiguous.
    array = py::module_::import("numpy").attr("array")(array, py::arg("copy") = true,
                                                       py::arg("order") = "C");
  }
  const std::vector<std::int64_t> strides = ElementStrides(array);
  try {
    Tensor tensor =
        Tensor::Borrow(static_cast<const void*>(array.data()), dtype, ShapeOf(array), strides);
    return InputTensor{std::move(array), std::move(tensor)};
  } catch (const Error& e) {
    throw Error(fmt::format("[{}] {}: {}", function, argument, e.what()));
  }
}

Tensor WriteArray(const char* function, const char* argument, py::handle object, DType dtype) {
  py::array array = AsArray(function, argument, object);
  if (DtypeOf(function, argument, array) != dtype) {
    throw Error(fmt::format("[{}] {} has dtype {}, not {}", function, argument,
                            DtypeText(array.dtype()), DtypeText(NumpyDtype(dtype))));
  }
  if (!array.writeable()) {
    throw Error(fmt::format("[{}] {} is a read-only array", function, argument));
  }
  if (!Borrowable(array)) {
    throw Error(fmt::format(
        "[{}] {} has negative strides or misaligned elements (strides {} bytes): "
        "ringkv cannot write into it in place",
        function, argument,
        fmt::join(std::vector<py::ssize_t>(array.strides(), array.strides() + array.ndim()),
                  ", ")));
  }
  const std::vector<std::int64_t> strides = ElementStrides(array);
  try {
    return Tensor::Borrow(array.mutable_data(), dtype, ShapeOf(array), strides);
  } catch (const Error& e) {
    throw Error(fmt::format("[{}] {}: {}", function, argument, e.what()));
  }
}

py::array ToArray(const Tensor& tensor, bool writeable) {
  const auto item = static_cast<py::ssize_t>(SizeOf(tensor.Dtype()));
  std::vector<py::ssize_t> shape;
  std::vector<py::ssize_t> strides;
  for (int axis = 0; axis < tensor.Rank(); ++axis) {
    shape.push_back(static_cast<py::ssize_t>(tensor.Dim(axis)));
    strides.push_back(static_cast<py::ssize_t>(tensor.Stride(axis)) * item);
  }
  auto keep = std::make_unique<Tensor>(tensor);
  const void* data = keep->Data();
  py::capsule base(keep.get(), [](void* p) { delete static_cast<Tensor*>(p); });
  keep.release();  // the capsule owns it now
  py::array array(NumpyDtype(tensor.Dtype()), std::move(shape), std::move(strides), data, base);
  if (!writeable) array.attr("setflags")(py::arg("write") = false);
  return array;
}

py::dtype NumpyDtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return py::dtype("float32");
    case DType::kF16:
      return py::dtype("float16");
    case DType::kBF16:
      return py::dtype("uint16");
    case DType::kI8:
    case DType::kI4:
    case DType::kI4H:
      break;
  }
  throw Error(fmt::format("[ringkv] unknown dtype {}", static_cast<int>(dtype)));
}

std::optional<DType> ParseDtype(const char* function, const char* argument, py::handle object) {
  if (object.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(object)) {
    const auto name = object.cast<std::string>();
    // The library's names (the quantized ones by name only: numpy's int8 is a
    // plain integer array, not rows with scales), and numpy's long float names.
    if (auto named = StorageDTypeNamed(name)) return named;
    if (name == "float32") return DType::kF32;
    if (name == "float16") return DType::kF16;
    if (name == "bfloat16") return DType::kBF16;
  } else {
    try {
      const auto dtype = py::dtype::from_args(py::reinterpret_borrow<py::object>(object));
      if (auto parsed = FromNumpy(dtype)) return parsed;
    } catch (const py::error_already_set&) {
      // Not a dtype at all: reported below like any other value.
    }
  }
  throw Error(
      fmt::format("[{}] {} {} is not None, 'f32', 'f16', 'bf16', 'int8', 'int4', 'int4h' or numpy "
                  "float32, float16, "
                  "uint16 (bf16)",
                  function, argument, py::repr(object).cast<std::string>()));
}

}  // namespace ringkv::python
