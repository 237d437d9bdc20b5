# Installs the already-built tree into a scratch prefix, checks that the installed
# package names none of ringkv's private dependencies, then configures, builds and
# runs tests/install_consumer against it with GSL hidden from find_package. The
# scratch directory is new for each run; it is removed when the run passes and
# kept for inspection when not.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/../sub_build.cmake)
ringkv_scratch_dir(WORK_DIR ${WORK_DIR})
ringkv_step("install" ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)

# GSL, nlohmann_json, xxHash and xsimd are used only inside the library (no public
# header includes them), so the package must not ask its users for them.
file(GLOB_RECURSE package_files ${WORK_DIR}/prefix/*/cmake/ringkv/*.cmake)
if(NOT package_files)
  message(FATAL_ERROR "no package files under ${WORK_DIR}/prefix/*/cmake/ringkv")
endif()
foreach(file IN LISTS package_files)
  file(STRINGS ${file} lines)
  foreach(line IN LISTS lines)
    string(TOLOWER "${line}" lower)
    if(NOT lower MATCHES "^ *#" AND lower MATCHES "gsl|nlohmann|xxhash|xsimd")
      message(SEND_ERROR "${file} names a private dependency (${CMAKE_MATCH_0}): ${line}")
    endif()
  endforeach()
endforeach()

# Hiding GSL makes any find_package(Microsoft.GSL) of the package fail the configure.
ringkv_step("configure of the consumer" ${CMAKE_COMMAND} --no-warn-unused-cli
            -S ${SOURCE_DIR}/tests/install_consumer -B ${WORK_DIR}/build
            -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
            -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
            -DCMAKE_DISABLE_FIND_PACKAGE_Microsoft.GSL=ON)
ringkv_step("build of the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
ringkv_check_consumer(${WORK_DIR}/build/consumer)
file(REMOVE_RECURSE ${WORK_DIR})
