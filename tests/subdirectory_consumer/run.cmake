# Configures, builds and runs tests/subdirectory_consumer, a project that adds
# ringkv with add_subdirectory, where GoogleTest, Google Benchmark, CLI11 (the
# demo's command line) and pybind11 cannot be found: any find_package of them fails the
# configure. Then installs it: ringkv must install nothing into a parent's tree.
# SETTINGS holds the compiler and flags of the tree that runs the test.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/../sub_build.cmake)
include(${SETTINGS})
ringkv_compiler_cache(launcher ${SOURCE_DIR})
# The consumer's tree is the scratch directory itself, next to the tree that
# runs the test, so that ringkv's objects are compiler-cache hits on that tree's
# (sub_build.cmake); the install prefix is inside it.
ringkv_sibling_scratch_dir(WORK_DIR ${BUILD_DIR} subdirectory_consumer)
ringkv_step("configure of the consumer" ${CMAKE_COMMAND} --no-warn-unused-cli
            ${RINGKV_SUB_BUILD_ARGS} ${launcher}
            -S ${SOURCE_DIR}/tests/subdirectory_consumer -B ${WORK_DIR}
            -DRINGKV_SOURCE_DIR=${SOURCE_DIR}
            -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON)
ringkv_step("build of the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}
            --parallel ${RINGKV_SUB_BUILD_JOBS})
ringkv_check_consumer(${WORK_DIR}/consumer)

ringkv_step("install of the consumer" ${CMAKE_COMMAND} --install ${WORK_DIR}
            --prefix ${WORK_DIR}/prefix)
file(GLOB_RECURSE installed RELATIVE ${WORK_DIR}/prefix ${WORK_DIR}/prefix/*)
if(installed)
  message(FATAL_ERROR "the embedded ringkv installed files: ${installed}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
