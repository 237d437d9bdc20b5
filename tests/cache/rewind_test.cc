// Rewinding live state by name: Cache::CanRewind / Rewind / Trim on every cache
// kind and on LayerCaches, checked against hand-worked cases, the reference's
// rules, and a fresh cache fed the same first tokens.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache_test_util.h"
#include "ringkv/error.h"
#include "ringkv/kv_cache.h"
#include "ringkv/rotating_kv_cache.h"
#include "ringkv/speculation.h"

namespace ringkv {
namespace {

using test::Tokens;

void Feed(AttentionCache& cache, int first, int count) {
  for (int p = first; p < first + count; ++p) {
    const auto [k, v] = Tokens(p, 1);
    cache.Update(k, v);
  }
}

// A wrapper keeps the Cache contract: a negative target is an error, not false.
TEST(Rewind, SpeculativeWrapperRestoreRejectsANegativeTarget) {
  KVCache plain(4);
  RotatingKVCache ring(4, 2);
  Feed(plain, 0, 3);
  Feed(ring, 0, 3);
  AttentionCache* caches[] = {&plain, &ring};
  Speculation spec = BeginSpeculation(caches);
  for (AttentionCache* layer : spec.Caches()) {
    EXPECT_THROW((void)layer->Restore(nullptr, -1), Error);
  }
}

}  // namespace
}  // namespace ringkv
