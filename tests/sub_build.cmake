# Helpers for the tests that configure and build other CMake projects from a
# `cmake -P` script (install_consumer, subdirectory_consumer, build_options).

# ringkv_scratch_dir(<var> <parent>): a new directory under <parent> (mktemp -d),
# so two runs at once never share or delete each other's files.
function(ringkv_scratch_dir var parent)
  file(MAKE_DIRECTORY ${parent})
  ringkv_mktemp_dir(dir ${parent}/run.XXXXXX)
  set(${var} ${dir} PARENT_SCOPE)
endfunction()

# ringkv_sibling_scratch_dir(<var> <build dir> <name>): a new directory next to
# <build dir>, named <build dir>-<name>.XXXXXX. A tree built there sits as deep
# below the source tree as <build dir> itself, so with ccache's base directory at
# the source tree (tools/test.sh) its compile commands are the same, relative
# paths included, and it reuses the objects <build dir> compiled: building the
# option trees then costs a few links, not another cold build.
function(ringkv_sibling_scratch_dir var build_dir name)
  ringkv_mktemp_dir(dir ${build_dir}-${name}.XXXXXX)
  set(${var} ${dir} PARENT_SCOPE)
endfunction()

function(ringkv_mktemp_dir var template)
  execute_process(COMMAND mktemp -d ${template}
                  OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "mktemp -d ${template} failed: ${rc}")
  endif()
  message(STATUS "scratch directory: ${dir}")
  set(${var} ${dir} PARENT_SCOPE)
endfunction()

# ringkv_step(<what> <command...>): runs the command and stops the test, naming
# the step, when it fails.
function(ringkv_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${what} failed: ${rc}")
  endif()
endfunction()

# ringkv_check_consumer(<program>): runs a consumer built from
# tests/install_consumer/main.cc and checks that it reports success.
function(ringkv_check_consumer program)
  execute_process(COMMAND ${program} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  message(STATUS "consumer printed: ${out}")
  if(rc)
    message(FATAL_ERROR "consumer exited with ${rc}")
  endif()
  if(NOT out MATCHES "ringkv consumer ok")
    message(FATAL_ERROR "consumer output unexpected")
  endif()
endfunction()

# ringkv_compiler_cache(<var> <source dir>): sets <var> to the configure
# argument that builds through a compiler cache (the launcher of the tree that
# runs the test, else ccache when installed; empty when neither), and lets ccache
# reuse the objects of earlier runs, whose trees were in other scratch
# directories: paths are hashed relative to the source tree, and the working
# directory not at all (the debug information of these throw-away builds may
# name the wrong one).
function(ringkv_compiler_cache var source_dir)
  set(arg "")
  if(NOT RINGKV_SUB_BUILD_ARGS MATCHES "CMAKE_CXX_COMPILER_LAUNCHER")
    find_program(ccache ccache)
    if(ccache)
      set(arg -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache})
    endif()
  endif()
  set(ENV{CCACHE_BASEDIR} ${source_dir})
  set(ENV{CCACHE_NOHASHDIR} 1)
  set(${var} ${arg} PARENT_SCOPE)
endfunction()
