# ringkv_set_warnings(<target>): the warning set every ringkv target builds with.
# RINGKV_WERROR (on in CI) turns them into errors.
function(ringkv_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wdouble-promotion -Wconversion -Wsign-conversion)
  if(RINGKV_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
