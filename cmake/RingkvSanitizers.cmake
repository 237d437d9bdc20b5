# Sanitizers apply to every target in the tree so that the library, the tests and
# the tools agree on the runtime.
macro(ringkv_apply_sanitizers)
  set(_ringkv_san "")
  if(RINGKV_ASAN)
    list(APPEND _ringkv_san address)
  endif()
  if(RINGKV_UBSAN)
    list(APPEND _ringkv_san undefined)
  endif()
  if(RINGKV_TSAN)
    # ThreadSanitizer cannot share a process with AddressSanitizer.
    if(RINGKV_ASAN)
      message(FATAL_ERROR "RINGKV_TSAN and RINGKV_ASAN cannot be combined")
    endif()
    list(APPEND _ringkv_san thread)
  endif()
  if(_ringkv_san)
    list(JOIN _ringkv_san "," _ringkv_san_list)
    add_compile_options(-fsanitize=${_ringkv_san_list} -fno-omit-frame-pointer
                        -fno-sanitize-recover=all)
    add_link_options(-fsanitize=${_ringkv_san_list})
  endif()
endmacro()
