#pragma once
// Speculative decoding over a model's caches (the reference's BeginSpeculation).
// The target model runs one forward over the drafted tokens through per-layer
// wrappers; Commit(n) then keeps only the first n accepted tokens in the live
// caches:
//   KVCache layer:         the wrapper writes through; Commit rewinds to start + n.
//   RotatingKVCache layer: the wrapper buffers the drafted K/V and attends over the
//                          live window (logical order) + the buffer; the live
//                          cache is not touched until Commit appends the first n.
// A speculation that ends without Commit (destroyed, e.g. by an exception in
// the forward, or move-assigned over) rolls every layer back to where it began:
// the write-through layers rewind to start, the buffered drafts are dropped.
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
  // Keeps the first n drafted tokens (n is clamped to [0, drafted], so any int is
  // fine) and ends the speculation: the wrappers then refuse further drafts.
  // Throws ringkv::Error, changing nothing, when the speculation has already
  // ended (a second Commit: committing twice would append the drafts twice; or
  // a moved-from object), or when the layers drafted different numbers of
  // tokens (a forward that did not reach every layer: let the speculation go,
  // which rolls it back). Should an append allocation fail part-way, layers may
  // be left at different offsets; the next joint operation reports it.
  void Commit(int n);

 private:
  friend Speculation BeginSpeculation(std::span<AttentionCache* const> caches);
  Speculation();
  void Rollback() noexcept;

  std::vector<std::unique_ptr<detail::SpeculativeLayer>> layers_;
  std::vector<AttentionCache*> views_;
  bool open_ = false;  // begun and neither committed nor rolled back
};

// Each cache must be a KVCache, a RotatingKVCache or null, and the non-null
// caches must be at one offset, else ringkv::Error. The caches must outlive
// the returned object.
Speculation BeginSpeculation(std::span<AttentionCache* const> caches);

// Wrappers that record drafted K/V without ever mutating the live caches (the
// same checks as BeginSpeculation).
std::vector<std::unique_ptr<AttentionCache>> BeginIsolatedSpeculation(
    std::span<AttentionCache* const> caches);

}  // namespace ringkv
