#include "ringkv/cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "kv_input.h"
#include "ringkv/error.h"

namespace ringkv {

bool Cache::CanRewind(int target) const {
  detail::CheckTarget("Cache::CanRewind", target);
  return Rewindable(target);
}

bool Cache::Rewind(int target) {
  detail::CheckTarget("Cache::Rewind", target);
  return Restore(nullptr, target);
}

int Cache::Trim(int n) {
  if (n < 0) throw Error(fmt::format("[Cache::Trim] n {} is negative", n));
  const int removed = std::min(n, Offset());
  return Restore(nullptr, Offset() - removed) ? removed : 0;
}

std::optional<DType> AttentionCache::StorageDtype() const noexcept {
  const std::optional<KvStorage> storage = Storage();
  if (!storage.has_value() || storage->keys != storage->values) return std::nullopt;
  return storage->keys;
}

}  // namespace ringkv
