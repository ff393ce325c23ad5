# Install rules.  One layout for a normal C install (lib/, include/,
# lib/cmake/, lib/pkgconfig/) and one for the wheel, where scikit-build-core
# puts everything inside the Python package next to its loader.  Either way
# the tree holds the library, both header names, the CMake package miopen_bn
# (target miopen_bn::miopen_bn), miopen_bn.pc and, on request, the
# MIOpen-compatible CMake package (miopen / MIOpen, target MIOpen).
include(CMakePackageConfigHelpers)

if(SKBUILD)
  set(MIOPEN_BN_INSTALL_LIBDIR miopen_bn)
  set(MIOPEN_BN_INSTALL_INCLUDEDIR miopen_bn/include)
  set(MIOPEN_BN_INSTALL_CMAKEDIR miopen_bn/cmake)
  set(MIOPEN_BN_INSTALL_PKGCONFIGDIR miopen_bn/pkgconfig)
else()
  include(GNUInstallDirs)
  set(MIOPEN_BN_INSTALL_LIBDIR ${CMAKE_INSTALL_LIBDIR})
  set(MIOPEN_BN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
  set(MIOPEN_BN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake)
  set(MIOPEN_BN_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

install(TARGETS miopen_bn EXPORT miopen_bn-targets
  LIBRARY DESTINATION ${MIOPEN_BN_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${MIOPEN_BN_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${MIOPEN_BN_INSTALL_INCLUDEDIR})
install(FILES include/miopen_bn.h DESTINATION ${MIOPEN_BN_INSTALL_INCLUDEDIR})
install(FILES include/miopen/miopen.h DESTINATION ${MIOPEN_BN_INSTALL_INCLUDEDIR}/miopen)

# CMake package miopen_bn.  0.x releases may break the ABI at each minor
# version, so a request is satisfied only by the same major.minor.
install(EXPORT miopen_bn-targets NAMESPACE miopen_bn::
  DESTINATION ${MIOPEN_BN_INSTALL_CMAKEDIR}/miopen_bn)
if(MIOPEN_BN_GPU STREQUAL "OFF")
  set(MIOPEN_BN_HAS_GPU FALSE)
else()
  set(MIOPEN_BN_HAS_GPU TRUE)
endif()
configure_package_config_file(cmake/miopen_bn-config.cmake.in
  ${PROJECT_BINARY_DIR}/package/miopen_bn-config.cmake
  INSTALL_DESTINATION ${MIOPEN_BN_INSTALL_CMAKEDIR}/miopen_bn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/miopen_bn-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/miopen_bn-config.cmake
              ${PROJECT_BINARY_DIR}/package/miopen_bn-config-version.cmake
  DESTINATION ${MIOPEN_BN_INSTALL_CMAKEDIR}/miopen_bn)

# MIOpen-compatible package: one lower-case file name that find_package finds
# for both miopen and MIOpen.  It reports the MIOpen API version the library
# implements, and any older request is met (the batch-norm API is unchanged).
if(MIOPEN_BN_INSTALL_MIOPEN_COMPAT)
  configure_file(cmake/miopen-config.cmake.in ${PROJECT_BINARY_DIR}/package/miopen-config.cmake @ONLY)
  miopen_bn_header_version(MIOPEN_BN_MIOPEN_API_VERSION MIOPEN_BN_MIOPEN_API_VERSION)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/miopen-config-version.cmake
    VERSION ${MIOPEN_BN_MIOPEN_API_VERSION} COMPATIBILITY AnyNewerVersion)
  install(FILES ${PROJECT_BINARY_DIR}/package/miopen-config.cmake
                ${PROJECT_BINARY_DIR}/package/miopen-config-version.cmake
    DESTINATION ${MIOPEN_BN_INSTALL_CMAKEDIR}/miopen)
endif()

# pkg-config: paths relative to the .pc file, so a moved tree (or the wheel's,
# built in a temporary prefix) still resolves.
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${MIOPEN_BN_INSTALL_${dir}}")
    set(MIOPEN_BN_PC_${dir} "${MIOPEN_BN_INSTALL_${dir}}")
  else()
    file(RELATIVE_PATH relative "/prefix/${MIOPEN_BN_INSTALL_PKGCONFIGDIR}" "/prefix/${MIOPEN_BN_INSTALL_${dir}}")
    string(REGEX REPLACE "/$" "" relative "${relative}")
    set(MIOPEN_BN_PC_${dir} "\${pcfiledir}/${relative}")
  endif()
endforeach()
configure_file(cmake/miopen_bn.pc.in ${PROJECT_BINARY_DIR}/package/miopen_bn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/miopen_bn.pc DESTINATION ${MIOPEN_BN_INSTALL_PKGCONFIGDIR})
