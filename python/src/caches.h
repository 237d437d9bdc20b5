#pragma once
// The Python cache objects: ringkv.AttentionCache (the base: what every cache,
// a LayerCaches' layer and a speculation's wrapper can do), ringkv.KVCache and
// ringkv.RotatingKVCache. A Python cache refers to its C++ cache through a
// CacheSource, which knows where the cache lives and whether it still does.

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "ringkv/cache.h"
#include "ringkv/layer_caches.h"

namespace ringkv::python {

namespace py = pybind11;

class CacheSource {
 public:
  virtual ~CacheSource() = default;
  // The cache, or ringkv::Error naming `function` when it is gone (taken over
  // by a LayerCaches, a speculation that ended, a layer index past the end).
  virtual AttentionCache& Get(const char* function) = 0;
};

// A cache the Python object owns (ringkv.KVCache(...), fork()).
class OwnedCache final : public CacheSource {
 public:
  explicit OwnedCache(LayerCaches::Layer cache) : cache_(std::move(cache)) {}
  AttentionCache& Get(const char* function) override;
  // Moves the cache out (LayerCaches([...]) takes it over); Get throws after.
  LayerCaches::Layer Take(const char* function);
  bool Taken() const noexcept { return taken_; }

 private:
  LayerCaches::Layer cache_;
  bool taken_ = false;
};

class PyCache {
 public:
  explicit PyCache(std::shared_ptr<CacheSource> source) : source_(std::move(source)) {}
  AttentionCache& Get(const char* function) const { return source_->Get(function); }
  const std::shared_ptr<CacheSource>& Source() const noexcept { return source_; }

 private:
  std::shared_ptr<CacheSource> source_;
};

class PyKVCache : public PyCache {
 public:
  using PyCache::PyCache;
};

class PyRotatingKVCache : public PyCache {
 public:
  using PyCache::PyCache;
};

// A Python object for `cache` (reached through `source`): a ringkv.KVCache or
// ringkv.RotatingKVCache by its dynamic type, else a ringkv.AttentionCache.
py::object WrapCache(std::shared_ptr<CacheSource> source, AttentionCache& cache);

}  // namespace ringkv::python
