# Install rules and an exported package, so that a user's
#   find_package(ringkv) + target_link_libraries(app ringkv::core)
# works against an installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ringkv_kernels ringkv_core
        EXPORT ringkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels/ringkv ${PROJECT_SOURCE_DIR}/lib/ringkv
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

set(_ringkv_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ringkv)
install(EXPORT ringkvTargets NAMESPACE ringkv:: DESTINATION ${_ringkv_cmake_dir})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ringkvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ringkvConfig.cmake
  INSTALL_DESTINATION ${_ringkv_cmake_dir})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ringkvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ringkvConfig.cmake
              ${PROJECT_BINARY_DIR}/ringkvConfigVersion.cmake
        DESTINATION ${_ringkv_cmake_dir})
