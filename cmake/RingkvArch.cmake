# RINGKV_ARCH: the kernel tier family of the target (not the build host, so a
# cross build picks the target's): "x86_64" (sse42/avx2/avx512 tiers), "aarch64"
# (the neon tier), or "generic" (the scalar tier alone).
string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" _ringkv_processor)
if(_ringkv_processor MATCHES "^(x86_64|amd64|x64)$")
  set(RINGKV_ARCH x86_64)
elseif(_ringkv_processor MATCHES "^(aarch64|arm64)$")
  set(RINGKV_ARCH aarch64)
else()
  set(RINGKV_ARCH generic)
endif()
message(STATUS "ringkv: kernel tiers for ${RINGKV_ARCH} (CMAKE_SYSTEM_PROCESSOR ${CMAKE_SYSTEM_PROCESSOR})")
