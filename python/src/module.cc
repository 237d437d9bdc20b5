// The extension module ringkv._ringkv; python/ringkv/__init__.py re-exports it.

#include <pybind11/pybind11.h>

#include "register.h"

PYBIND11_MODULE(_ringkv, m) {
  namespace rp = ringkv::python;
  m.doc() = "ringkv: KV caches and attention for numpy decode loops (C++ extension)";
  rp::RegisterErrors(m);
  rp::RegisterContext(m);
  rp::RegisterSnapshots(m);
  rp::RegisterHistory(m);
  rp::RegisterCaches(m);
  rp::RegisterLayerCaches(m);
  rp::RegisterSpeculation(m);
  rp::RegisterAttention(m);
#ifdef RINGKV_PYTHON_PROMPT_CACHE
  rp::RegisterPromptCache(m);
#endif
}
