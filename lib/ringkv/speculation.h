#pragma once
// Speculative decoding over a model's caches (the reference's BeginSpeculation).
// The target model runs one forward over the drafted tokens through per-layer
// wrappers; Commit(n) then keeps only the first n accepted tokens in the live
// caches:
//   KVCache layer:         the wrapper writes through; Commit rewinds to start + n.
//   RotatingKVCache layer: the wrapper buffers the drafted K/V and attends over the
//                          live window (logical order) + the buffer; the live
//                          cache is not touched until Commit appends the first n.
// The isolated mode never mutates the live caches (for correctness checks).

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "ringkv/cache.h"

namespace ringkv {

namespace detail {
class SpeculativeLayer;
}

class Speculation {
 public:
  Speculation(Speculation&&) noexcept;
  Speculation& operator=(Speculation&&) noexcept;
  ~Speculation();

  // The wrappers, index-aligned with the caches given to BeginSpeculation (null
  // where a null cache was given). Use them for this one forward only.
  std::span<AttentionCache* const> Caches() const noexcept { return views_; }
  // Keeps the first n drafted tokens (n is clamped to [0, drafted]).
  void Commit(int n);

 private:
  friend Speculation BeginSpeculation(std::span<AttentionCache* const> caches);
  Speculation();

  std::vector<std::unique_ptr<detail::SpeculativeLayer>> layers_;
  std::vector<AttentionCache*> views_;
};

// Each cache must be a KVCache, a RotatingKVCache or null, else ringkv::Error.
// The caches must outlive the returned object.
Speculation BeginSpeculation(std::span<AttentionCache* const> caches);

// Wrappers that record drafted K/V without ever mutating the live caches.
std::vector<std::unique_ptr<AttentionCache>> BeginIsolatedSpeculation(
    std::span<AttentionCache* const> caches);

}  // namespace ringkv
