# Whole suites run once per kernel tier, through the process tier cap RINGKV_ISA
# (docs/kernels.md, "Capping the tier").
#
# ringkv_add_tier_runs(NAME <name> COMMAND <command> [args...] [TIMEOUT <seconds>])
#   adds, for every tier this build compiles, a test tier.<key>.<name> (label
#   "tier") that runs `ringkv_tier_run <key> <command> [args...]`: the command with
#   RINGKV_ISA=<key> when this CPU runs that tier, otherwise a check that the tier
#   is refused. Each run gets its own TMPDIR, so runs of one suite on several
#   tiers at once never share a temporary file.
function(ringkv_add_tier_runs)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  # Cross builds: ctest runs ringkv_tier_run under the emulator, but the command
  # it execs is a target binary too, which the host kernel cannot exec without
  # binfmt_misc; exec the emulator instead (an emulated execve of a host program
  # runs it natively, and it inherits RINGKV_ISA).
  if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
    list(PREPEND ARG_COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR})
  endif()
  set(keys scalar)
  if(RINGKV_ARCH STREQUAL "x86_64")
    list(APPEND keys sse42 avx2)
    if(RINGKV_ENABLE_AVX512)
      list(APPEND keys avx512)
    endif()
  elseif(RINGKV_ARCH STREQUAL "aarch64")
    list(APPEND keys neon)
  endif()
  foreach(key IN LISTS keys)
    set(test tier.${key}.${ARG_NAME})
    set(tmp ${CMAKE_BINARY_DIR}/tier_tmp/${key}.${ARG_NAME})
    file(MAKE_DIRECTORY ${tmp})
    add_test(NAME ${test} COMMAND ringkv_tier_run ${key} ${ARG_COMMAND})
    set_tests_properties(${test} PROPERTIES
      LABELS tier TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "TMPDIR=${tmp}")
  endforeach()
endfunction()
