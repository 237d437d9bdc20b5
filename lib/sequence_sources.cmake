# Sources of the multi-sequence caches and batched attention (part of ringkv_core).
# The cell cache and its sequence snapshots.
target_sources(ringkv_core PRIVATE
  src/sequence/batch_planner.cc
  src/sequence/block_pool.cc
  src/sequence/block_refs.cc
  src/sequence/causal_cache.cc
  src/sequence/causal_options.cc
  src/sequence/causal_snapshot.cc
  src/sequence/forward_pass.cc
  src/sequence/remove_shift.cc
  src/sequence/extents.cc
  src/sequence/sliding_window.cc)
# Batch histories, the batched attention entry points, EncoderCache, WrapperCache.
target_sources(ringkv_core PRIVATE
  src/sequence/batch_attention.cc
  src/sequence/batch_history.cc
  src/sequence/encoder_cache.cc
  src/sequence/wrapper_cache.cc)
