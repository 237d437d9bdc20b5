#pragma once
// Where a forward pass spends its time: steady_clock around the attention calls
// (SDPA), around the cache writes, and around the whole pass.

#include <cstdint>

namespace ringkv::model {

struct ForwardStats {
  double sdpa_seconds = 0;   // attention calls (the SDPA kernel and mask handling)
  double cache_seconds = 0;  // Update: K/V written into the caches
  double total_seconds = 0;  // the whole forward, both of the above included
  std::int64_t tokens = 0;
  std::int64_t calls = 0;

  double OtherSeconds() const { return total_seconds - sdpa_seconds - cache_seconds; }
  ForwardStats& operator+=(const ForwardStats& o) {
    sdpa_seconds += o.sdpa_seconds;
    cache_seconds += o.cache_seconds;
    total_seconds += o.total_seconds;
    tokens += o.tokens;
    calls += o.calls;
    return *this;
  }
};

}  // namespace ringkv::model
