# Configures ringkv with every combination of RINGKV_BUILD_TESTS,
# RINGKV_BUILD_BENCHMARKS and RINGKV_BUILD_TOOLS, each with the packages that
# only the parts switched off need hidden from find_package, and builds each
# (default target). RINGKV_BUILD_PYTHON is off in those eight (pybind11 and
# Python hidden) and on in a ninth tree alone, with everything else off: the
# module depends on the libraries only, so one tree covers it without doubling
# the eight. SETTINGS holds the compiler and flags of the tree that runs the test.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/../sub_build.cmake)
include(${SETTINGS})
# Each tree is built in turn in one directory next to the tree that runs the
# test (BUILD_DIR), so every compile can be a compiler-cache hit on that tree's
# objects (sub_build.cmake); the directory is emptied between trees.
ringkv_sibling_scratch_dir(WORK_DIR ${BUILD_DIR} build_options)

# The eight trees compile the same sources with the same flags: a compiler cache
# turns all but the first compile of each source into a copy, so building all
# eight costs about one full build, or a few links when BUILD_DIR's objects are
# in the cache.
ringkv_compiler_cache(launcher ${SOURCE_DIR})
if(launcher OR RINGKV_SUB_BUILD_ARGS MATCHES "CMAKE_CXX_COMPILER_LAUNCHER")
  set(build_all TRUE)
else()
  # Without a compiler cache, build the three trees that each add one part to
  # the libraries: together they compile every target once, except the demo's
  # tests (tests and tools both on), which the tree that runs this test builds
  # by default. No other target's definition depends on more than its own
  # option. The other five trees are only configured, where
  # CMAKE_LINK_LIBRARIES_ONLY_TARGETS catches a library that a part links but
  # the combination does not define.
  set(build_all FALSE)
  message(STATUS "no compiler cache: building three of the eight trees")
endif()
set(fallback_trees tests-ON_benchmarks-OFF_tools-OFF tests-OFF_benchmarks-ON_tools-OFF
                   tests-OFF_benchmarks-OFF_tools-ON)

foreach(tests IN ITEMS OFF ON)
  foreach(benchmarks IN ITEMS OFF ON)
    foreach(tools IN ITEMS OFF ON)
      set(combo tests-${tests}_benchmarks-${benchmarks}_tools-${tools})
      set(hidden "")
      if(NOT tests)
        list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
      endif()
      if(NOT benchmarks)
        list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
      endif()
      if(NOT tools AND NOT benchmarks)  # the tools and ringkv_sdpa_probe parse flags with it
        list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON)
      endif()
      string(TIMESTAMP start "%s")
      ringkv_step("configure of ${combo}" ${CMAKE_COMMAND} --no-warn-unused-cli
                  ${RINGKV_SUB_BUILD_ARGS} ${launcher}
                  -S ${SOURCE_DIR} -B ${WORK_DIR} -DRINGKV_BUILD_TESTS=${tests}
                  -DRINGKV_BUILD_BENCHMARKS=${benchmarks} -DRINGKV_BUILD_TOOLS=${tools}
                  -DRINGKV_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON
                  -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON ${hidden})
      if(build_all OR combo IN_LIST fallback_trees)
        ringkv_step("build of ${combo}" ${CMAKE_COMMAND} --build ${WORK_DIR}
                    --parallel ${RINGKV_SUB_BUILD_JOBS})
        set(what "configured and built")
      else()
        set(what "configured")
      endif()
      string(TIMESTAMP end "%s")
      math(EXPR seconds "${end} - ${start}")
      message(STATUS "${combo}: ${what} in ${seconds} s")
      # The next tree starts empty (and the disk is freed).
      file(REMOVE_RECURSE ${WORK_DIR})
      file(MAKE_DIRECTORY ${WORK_DIR})
    endforeach()
  endforeach()
endforeach()

# The Python module alone (always built: no other tree compiles it), then imported
# from the build tree with the interpreter it was built for.
set(combo python-only)
string(TIMESTAMP start "%s")
ringkv_step("configure of ${combo}" ${CMAKE_COMMAND} --no-warn-unused-cli
            ${RINGKV_SUB_BUILD_ARGS} ${launcher}
            -S ${SOURCE_DIR} -B ${WORK_DIR} -DRINGKV_BUILD_TESTS=OFF
            -DRINGKV_BUILD_BENCHMARKS=OFF -DRINGKV_BUILD_TOOLS=OFF -DRINGKV_BUILD_PYTHON=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON)
ringkv_step("build of ${combo}" ${CMAKE_COMMAND} --build ${WORK_DIR}
            --parallel ${RINGKV_SUB_BUILD_JOBS})
load_cache(${WORK_DIR} READ_WITH_PREFIX built_ Python3_EXECUTABLE _Python3_EXECUTABLE)
if(NOT built_Python3_EXECUTABLE)
  set(built_Python3_EXECUTABLE ${built__Python3_EXECUTABLE})  # FindPython3's own entry
endif()
ringkv_step("import of ringkv from ${combo}" ${CMAKE_COMMAND} -E env
            PYTHONPATH=${WORK_DIR}/python PYTHONDONTWRITEBYTECODE=1
            ${built_Python3_EXECUTABLE} -c "import ringkv; ringkv.KVCache()")
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
message(STATUS "${combo}: configured, built and imported in ${seconds} s")
file(REMOVE_RECURSE ${WORK_DIR})
