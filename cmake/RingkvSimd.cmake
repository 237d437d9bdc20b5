# ringkv_add_isa_kernels(<name> SOURCE <file> FLAGS <flags...>)
# Builds one per-ISA translation unit as an OBJECT library. Only that TU gets the
# ISA flags, so the rest of the library stays runnable on baseline x86-64.
function(ringkv_add_isa_kernels name)
  cmake_parse_arguments(ARG "" "SOURCE" "FLAGS" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCE})
  target_include_directories(${name} PRIVATE
    ${PROJECT_SOURCE_DIR}/kernels ${PROJECT_SOURCE_DIR}/kernels/src)
  target_link_libraries(${name} PRIVATE xsimd Microsoft.GSL::GSL)
  if(NOT RINGKV_NATIVE)
    target_compile_options(${name} PRIVATE ${ARG_FLAGS})
  endif()
  # Unoptimised code emits every inline helper it calls (std::bit_cast,
  # xsimd::constants::infinity, ...) as a weak symbol, compiled with this unit's
  # ISA flags, which the linker may then hand to baseline callers (see
  # docs/kernels.md, "linkage"). Optimising these units, even in Debug, inlines them.
  target_compile_options(${name} PRIVATE $<$<CONFIG:Debug>:-O2>)
  # AddressSanitizer's use-after-scope check poisons and unpoisons every local of
  # every inlined SIMD helper: in these units it multiplies the object size by eight
  # and the compile time by five (docs/ci.md). The heap, global and stack bounds
  # checks stay; the rest of the tree keeps use-after-scope.
  if(RINGKV_ASAN)
    target_compile_options(${name} PRIVATE -fno-sanitize-address-use-after-scope)
  endif()
  # Every kernel function starts on a cache line, so that its loops keep their
  # alignment when unrelated code above them grows or shrinks: without it, a
  # change elsewhere in a unit moved the f16 decode's V loop and made it several
  # per cent slower or faster (docs/attention_tuning.md, "Prefill overheads").
  target_compile_options(${name} PRIVATE -falign-functions=64)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  ringkv_set_warnings(${name})
endfunction()
