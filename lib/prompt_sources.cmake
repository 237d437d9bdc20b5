# The prompt cache (prefix trie of snapshots, persistence) and the caches file
# (SaveCaches / LoadCaches, sharing its format code); part of ringkv_core.
# nlohmann_json (header-only) and xxHash (used header-only, XXH_INLINE_ALL) stay
# out of the public headers and out of the installed package's requirements.
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(RINGKV_XXHASH REQUIRED IMPORTED_TARGET libxxhash)

target_sources(ringkv_core PRIVATE
  src/prompt/atomic_file.cc
  src/prompt/cache_file_read.cc
  src/prompt/cache_file_write.cc
  src/prompt/caches_format.cc
  src/prompt/file_frame.cc
  src/prompt/file_layer.cc
  src/prompt/quantized_side.cc
  src/prompt/file_nodes.cc
  src/prompt/file_source.cc
  src/prompt/file_tensors.cc
  src/prompt/held_blocks.cc
  src/prompt/json_fields.cc
  src/prompt/metadata_file_write.cc
  src/prompt/prompt_cache.cc
  src/prompt/prompt_cache_file.cc
  src/prompt/prompt_file_read.cc
  src/prompt/prompt_file_write.cc
  src/prompt/prompt_restore.cc
  src/prompt/prompt_trie.cc
  src/prompt/quantized_layer.cc
  src/prompt/sequence_file_read.cc
  src/prompt/sequence_file_write.cc
  src/prompt/sequence_prompt_cache.cc
  src/prompt/sequence_prompt_trie.cc
  src/prompt/sequence_snapshot_access.cc
  src/prompt/snapshot_access.cc
  src/prompt/span_storage.cc
  src/prompt/temp_files.cc)
# BUILD_INTERFACE: only include paths are needed, so the exported target names neither.
target_link_libraries(ringkv_core PRIVATE
  $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>
  $<BUILD_INTERFACE:PkgConfig::RINGKV_XXHASH>)
