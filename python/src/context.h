#pragma once
// ringkv.Context, and the context a `ctx=None` argument stands for.

#include <pybind11/pybind11.h>

#include <memory>

#include "ringkv/context.h"

namespace ringkv::python {

namespace py = pybind11;

struct PyContext {
  std::shared_ptr<Context> context;
};

// The Context of a ctx argument: the ringkv.Context given, or for None this
// thread's default Context (one thread, the best tier), made at its first use.
// Per thread because a Context's arena serves one call at a time: a default
// shared by all threads would make threads that released the GIL queue for it
// (docs/embedding.md: give each thread its own Context). Call with the GIL held;
// the result stays valid while the argument does.
Context& ContextOf(const char* function, py::handle ctx);

}  // namespace ringkv::python
