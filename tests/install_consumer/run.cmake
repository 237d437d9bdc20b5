# Installs the already-built tree into a scratch prefix, then configures, builds and
# runs tests/install_consumer against it. The scratch directory is new for each run
# (mktemp -d under WORK_DIR), so two runs at once never share or delete each
# other's prefix; it is removed when the run passes and kept for inspection when not.
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND mktemp -d ${WORK_DIR}/run.XXXXXX
                OUTPUT_VARIABLE WORK_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "mktemp -d under ${WORK_DIR} failed: ${rc}")
endif()
message(STATUS "scratch directory: ${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install_consumer
                  -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configure of the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "build of the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer printed: ${out}")
if(rc)
  message(FATAL_ERROR "consumer exited with ${rc}")
endif()
if(NOT out MATCHES "ringkv consumer ok")
  message(FATAL_ERROR "consumer output unexpected")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
