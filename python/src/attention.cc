// ringkv.attention (over a cache's History) and ringkv.scaled_dot_product_attention
// (over plain arrays). Both run with the GIL released.

#include "ringkv/attention.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>

#include "arrays.h"
#include "context.h"
#include "history.h"
#include "register.h"
#include "ringkv/error.h"

namespace ringkv::python {

namespace {

// A mask argument; `owner` keeps an array the mask reads alive during the call.
struct MaskArg {
  AttentionMask mask;
  InputTensor array;
};

// An array mask as [1, 1 or H, L or 1, K or 1] float: numpy's broadcasting
// rules add the missing leading axes; bool becomes 1 / 0 (visible / hidden).
MaskArg ArrayMask(const char* function, py::array array) {
  if (array.ndim() > 4) {
    throw Error(fmt::format("[{}] mask has rank {}, more than 4", function, array.ndim()));
  }
  py::list shape;
  for (py::ssize_t i = array.ndim(); i < 4; ++i) shape.append(1);
  for (py::ssize_t i = 0; i < array.ndim(); ++i) shape.append(array.shape(i));
  const bool boolean = array.dtype().kind() == 'b';
  if (boolean || array.dtype().equal(py::dtype("float64"))) {
    array = array.attr("astype")(py::dtype("float32"));
  }
  array = array.attr("reshape")(py::tuple(shape));
  MaskArg result{AttentionMask(), ReadArray(function, "mask", array)};
  result.mask = boolean ? AttentionMask::Boolean(result.array.tensor)
                        : AttentionMask::Additive(result.array.tensor);
  return result;
}

MaskArg ParseMask(const char* function, py::handle mask) {
  if (mask.is_none()) return MaskArg{AttentionMask::Zero(), {}};
  if (py::isinstance<py::str>(mask)) {
    const auto name = mask.cast<std::string>();
    if (name == "causal") return MaskArg{AttentionMask::Causal(), {}};
    if (name == "none") return MaskArg{AttentionMask::Zero(), {}};
  } else if (py::isinstance<py::tuple>(mask) && py::len(mask) == 2 &&
             py::isinstance<py::str>(mask[py::int_(0)]) &&
             py::isinstance<py::int_>(mask[py::int_(1)])) {
    const auto name = mask[py::int_(0)].cast<std::string>();
    const auto window = mask[py::int_(1)].cast<std::int64_t>();
    if (name == "window") return MaskArg{AttentionMask::WindowOnly(window), {}};
    if (name == "sliding_window") return MaskArg{AttentionMask::SlidingWindow(window), {}};
  } else if (py::isinstance<py::array>(mask)) {
    return ArrayMask(function, py::reinterpret_borrow<py::array>(mask));
  }
  throw Error(fmt::format(
      "[{}] mask {} is not None, 'causal', ('window', w), ('sliding_window', w) or an array",
      function, py::repr(mask).cast<std::string>()));
}

// 1/sqrt(D) for None: D is q's last dim (q of another rank is refused by the call).
float Scale(const Tensor& q, const std::optional<double>& scale) {
  if (scale) return static_cast<float>(*scale);
  if (q.Rank() != 4 || q.Dim(3) <= 0) return 1.0F;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.Dim(3))));
}

// Runs `call(out)` with the GIL released, into the caller's `out` (returned) or a
// fresh array.
template <class Call>
py::object Run(const char* function, py::handle out, Call&& call) {
  if (out.is_none()) {
    Tensor result;
    {
      py::gil_scoped_release release;
      result = call(nullptr);
    }
    return ToArray(result, /*writeable=*/true);
  }
  Tensor target = WriteArray(function, "out", out, DType::kF32);
  {
    py::gil_scoped_release release;
    call(&target);
  }
  return py::reinterpret_borrow<py::object>(out);
}

py::object AttentionOverHistory(py::handle q, const PyHistory& history, py::handle mask,
                                std::optional<double> scale, py::handle out, py::handle ctx) {
  constexpr const char* kFunction = "attention";
  const InputTensor query = ReadArray(kFunction, "q", q);
  const MaskArg logical = ParseMask(kFunction, mask);
  const float s = Scale(query.tensor, scale);
  Context& context = ContextOf(kFunction, ctx);
  return Run(kFunction, out, [&](Tensor* target) {
    if (target == nullptr) {
      return Attention(query.tensor, history.history, logical.mask, s, context);
    }
    Attention(query.tensor, history.history, logical.mask, s, context, *target);
    return Tensor();
  });
}

py::object Sdpa(py::handle q, py::handle k, py::handle v, py::handle mask,
                std::optional<double> scale, py::handle out, py::handle ctx) {
  constexpr const char* kFunction = "scaled_dot_product_attention";
  const InputTensor query = ReadArray(kFunction, "q", q);
  const InputTensor keys = ReadArray(kFunction, "k", k);
  const InputTensor values = ReadArray(kFunction, "v", v);
  const MaskArg m = ParseMask(kFunction, mask);
  const float s = Scale(query.tensor, scale);
  Context& context = ContextOf(kFunction, ctx);
  return Run(kFunction, out, [&](Tensor* target) {
    if (target == nullptr) {
      return ScaledDotProductAttention(query.tensor, keys.tensor, values.tensor, m.mask, s,
                                       context);
    }
    ScaledDotProductAttention(query.tensor, keys.tensor, values.tensor, m.mask, s, context,
                              *target);
    return Tensor();
  });
}

}  // namespace

void RegisterAttention(py::module_& m) {
  m.def("attention", &AttentionOverHistory, py::arg("q"), py::arg("history"),
        py::arg("mask") = "causal", py::arg("scale") = py::none(), py::arg("out") = py::none(),
        py::arg("ctx") = py::none(),
        "softmax(scale * q K^T + mask) V over a cache's History. q: [1, Hq, L, D] float32 / "
        "float16 / uint16 (bf16), Hq a multiple of Hkv. mask (keys in logical order): None, "
        "'causal', ('window', w), ('sliding_window', w), or an additive float / bool (True = "
        "visible) array broadcastable to [1, Hq, L, K]. scale None: 1/sqrt(D). out: a writeable "
        "float32 [1, Hq, L, Dv] array (any strides) written in place and returned; else a new "
        "array. ctx None: this thread's default Context.");
  m.def("scaled_dot_product_attention", &Sdpa, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("mask") = "causal", py::arg("scale") = py::none(), py::arg("out") = py::none(),
        py::arg("ctx") = py::none(),
        "attention() over plain arrays: k [1, Hkv, T, D], v [1, Hkv, T, Dv] of one dtype.");
}

}  // namespace ringkv::python
