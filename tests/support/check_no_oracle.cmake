# Fails when the kernels library carries the test oracle (defect 6 of issue 8):
# the float64 reference lives in tests/support and must never reach the library
# that is installed. Run as
#   cmake -DNM=<nm> -DLIBRARY=<libringkv_kernels.a> -P check_no_oracle.cmake
if(NOT NM OR NOT LIBRARY)
  message(FATAL_ERROR "usage: cmake -DNM=<nm> -DLIBRARY=<archive> -P check_no_oracle.cmake")
endif()
execute_process(
  COMMAND ${NM} --defined-only --demangle ${LIBRARY}
  OUTPUT_VARIABLE symbols
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIBRARY} (status ${status})")
endif()
string(REGEX MATCHALL "[^\n]*Reference[^\n]*" leaked "${symbols}")
if(leaked)
  list(JOIN leaked "\n  " lines)
  message(FATAL_ERROR "${LIBRARY} defines test-oracle symbols:\n  ${lines}")
endif()
message(STATUS "ok: ${LIBRARY} holds no Reference* symbol")
