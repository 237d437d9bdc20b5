# Tests that build ringkv the way others will: embedded with add_subdirectory,
# and with every combination of the build options. Both configure and build new
# trees with this tree's compiler, flags and options, written to a settings file
# that their scripts read. Their trees sit next to this one and share its
# compiler cache (ccache, sub_build.cmake), so when this tree was built through
# ccache (tools/test.sh) they mostly copy its objects. Each builds on every core,
# hence RUN_SERIAL; the timeout covers a cold cache on two busy cores.
set(_ringkv_sub_build_args
  -G "${CMAKE_GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}"
  "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}"
  "-DRINGKV_WERROR=${RINGKV_WERROR}"
  "-DRINGKV_NATIVE=${RINGKV_NATIVE}"
  "-DRINGKV_ENABLE_AVX512=${RINGKV_ENABLE_AVX512}"
  "-DRINGKV_TEST_CODE_FLAGS=${RINGKV_TEST_CODE_FLAGS}")
if(CMAKE_BUILD_TYPE)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _ringkv_config)
  list(APPEND _ringkv_sub_build_args
    "-DCMAKE_CXX_FLAGS_${_ringkv_config}=${CMAKE_CXX_FLAGS_${_ringkv_config}}")
endif()
if(CMAKE_CXX_COMPILER_LAUNCHER)
  list(APPEND _ringkv_sub_build_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}")
endif()
cmake_host_system_information(RESULT _ringkv_jobs QUERY NUMBER_OF_LOGICAL_CORES)
set(_ringkv_sub_build_settings ${CMAKE_CURRENT_BINARY_DIR}/sub_build_settings.cmake)
file(CONFIGURE OUTPUT ${_ringkv_sub_build_settings} CONTENT
"set(RINGKV_SUB_BUILD_ARGS [==[@_ringkv_sub_build_args@]==])
set(RINGKV_SUB_BUILD_JOBS @_ringkv_jobs@)
")

# The sub-builds are built without sanitizers, whose runtime the consumer would
# not link.
if(NOT RINGKV_ASAN AND NOT RINGKV_UBSAN AND NOT RINGKV_TSAN)
  add_test(NAME subdirectory_consumer
    COMMAND ${CMAKE_COMMAND}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DBUILD_DIR=${CMAKE_BINARY_DIR}
      -DSETTINGS=${_ringkv_sub_build_settings}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/subdirectory_consumer/run.cmake)
  add_test(NAME build_options
    COMMAND ${CMAKE_COMMAND}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
      -DBUILD_DIR=${CMAKE_BINARY_DIR}
      -DSETTINGS=${_ringkv_sub_build_settings}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/build_options/run.cmake)
  set_tests_properties(subdirectory_consumer PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  set_tests_properties(build_options PROPERTIES TIMEOUT 1200 RUN_SERIAL TRUE)
endif()
