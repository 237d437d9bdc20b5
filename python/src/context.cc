#include "context.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "register.h"
#include "ringkv/error.h"
#include "ringkv/kernels/sdpa.h"

namespace ringkv::python {

namespace {

std::optional<kernels::Isa> ParseIsa(const std::optional<std::string>& isa) {
  if (!isa) return std::nullopt;
  if (auto parsed = kernels::IsaFromKey(*isa)) return parsed;
  throw Error(fmt::format(
      "[Context] isa '{}' is not one of 'scalar', 'sse42', 'avx2', 'avx512', 'neon'", *isa));
}

}  // namespace

Context& ContextOf(const char* function, py::handle ctx) {
  if (ctx.is_none()) {
    // Destroyed at thread exit; the main thread's after the interpreter is gone,
    // which is fine: a Context holds no Python object.
    thread_local std::unique_ptr<Context> default_context;
    if (default_context == nullptr) default_context = std::make_unique<Context>(1);
    return *default_context;
  }
  if (!py::isinstance<PyContext>(ctx)) {
    throw Error(fmt::format("[{}] ctx must be a ringkv.Context or None, got {}", function,
                            Py_TYPE(ctx.ptr())->tp_name));
  }
  return *ctx.cast<PyContext&>().context;
}

void RegisterContext(py::module_& m) {
  py::class_<PyContext>(m, "Context",
                        "Where attention runs: a thread pool, a kernel tier and a scratch arena.\n"
                        "threads <= 0: one per hardware thread. isa: None (the best tier) or one "
                        "of 'scalar', 'sse42', 'avx2', 'avx512', 'neon'.")
      .def(py::init([](int threads, const std::optional<std::string>& isa) {
             const std::optional<kernels::Isa> tier = ParseIsa(isa);
             std::shared_ptr<Context> context;
             {
               py::gil_scoped_release release;  // starting threads may take a while
               context = std::make_shared<Context>(threads, tier);
             }
             return PyContext{std::move(context)};
           }),
           py::arg("threads") = 1, py::arg("isa") = py::none())
      .def_property_readonly(
          "tier",
          [](const PyContext& c) { return std::string(kernels::IsaKey(c.context->Tier())); })
      .def_property_readonly("threads", [](const PyContext& c) { return c.context->Threads(); })
      .def_property_readonly(
          "rounds_quantized_to_int16",
          [](const PyContext& c) { return kernels::RoundsQuantizedToInt16(c.context->Tier()); },
          "Whether this tier attends quantized K/V in decode-sized tiles with int16 "
          "multiply-adds, rounding queries and softmax weights to int16 (docs/quantized_kv.md).")
      .def_property_readonly(
          "rounds_bf16_queries",
          [](const PyContext& c) { return kernels::RoundsBf16Queries(c.context->Tier()); },
          "Whether this tier attends bf16 K with the queries rounded to bf16, for bf16 dot "
          "products (AVX-512 on CPUs with AVX512-BF16; docs/kernels.md, bf16 decode scores).")
      .def_property_readonly(
          "rounds_bf16_weights",
          [](const PyContext& c) { return kernels::RoundsBf16Weights(c.context->Tier()); },
          "Whether this tier weighs bf16 V with the softmax weights rounded to bf16, for bf16 "
          "dot products (where rounds_bf16_queries is; docs/kernels.md, bf16 V sums).")
      .def("__repr__", [](const PyContext& c) {
        return fmt::format("ringkv.Context(threads={}, isa='{}')", c.context->Threads(),
                           kernels::IsaKey(c.context->Tier()));
      });
  m.def(
      "available_isas",
      [] {
        std::vector<std::string> keys;
        for (kernels::Isa isa : kernels::AvailableIsas()) keys.emplace_back(kernels::IsaKey(isa));
        return keys;
      },
      "The kernel tiers this build and CPU can run (within RINGKV_ISA's cap), lowest first.");
}

}  // namespace ringkv::python
