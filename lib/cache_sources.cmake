# Sources of the caches, their snapshots as plain data, masks and the attention
# entry point (part of ringkv_core).
target_sources(ringkv_core PRIVATE
  src/cache/attention.cc
  src/cache/attention_checks.cc
  src/cache/attention_mask.cc
  src/cache/block_store.cc
  src/cache/cache.cc
  src/cache/context.cc
  src/cache/kv_cache.cc
  src/cache/kv_history.cc
  src/cache/kv_input.cc
  src/cache/layer_caches.cc
  src/cache/rotating_kv_cache.cc
  src/cache/snapshot_data.cc
  src/cache/speculation.cc
  src/cache/stored_rows.cc)
