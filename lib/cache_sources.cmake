# Sources of the caches, masks and the attention entry point (part of ringkv_core).
target_sources(ringkv_core PRIVATE)
