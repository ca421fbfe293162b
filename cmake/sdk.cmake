# sdk.cmake - the plugin SDK's install rules (component dev): the pkg-config
# file vt-plugin.pc and the CMake package vt (vtConfig.cmake,
# vtConfigVersion.cmake). Included by the top-level CMakeLists.txt after
# core/ (which installs the headers under include/vt/).
#
# Both files are relocatable: they locate the prefix from their own install
# location, so `cmake --install build --prefix P` works for any P, not only
# the CMAKE_INSTALL_PREFIX the build was configured with.
include(CMakePackageConfigHelpers)

# the plugin ABI version, from the header (not the project version: libvtcore's
# soname follows the project, plugins follow VT_ABI_MAJOR/MINOR)
file(STRINGS ${CMAKE_SOURCE_DIR}/core/include/vt/plugin.h _vt_abi REGEX "^#define VT_ABI_M(AJ|IN)OR ")
string(REGEX REPLACE ".*VT_ABI_MAJOR ([0-9]+).*" "\\1" VT_ABI_MAJOR "${_vt_abi}")
string(REGEX REPLACE ".*VT_ABI_MINOR ([0-9]+).*" "\\1" VT_ABI_MINOR "${_vt_abi}")

set(VT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vt)
set(VT_PKGCONFIG_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# vt-plugin.pc: prefix = ${pcfiledir}/<relative path back to the prefix>
file(RELATIVE_PATH VT_PC_PREFIX_REL "/vt-prefix/${VT_PKGCONFIG_INSTALL_DIR}" "/vt-prefix")
string(REGEX REPLACE "/$" "" VT_PC_PREFIX_REL "${VT_PC_PREFIX_REL}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/vt-plugin.pc.in ${CMAKE_BINARY_DIR}/sdk/vt-plugin.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sdk/vt-plugin.pc DESTINATION ${VT_PKGCONFIG_INSTALL_DIR}
        COMPONENT dev)
configure_file(${CMAKE_CURRENT_LIST_DIR}/vt-model-common.pc.in ${CMAKE_BINARY_DIR}/sdk/vt-model-common.pc
               @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sdk/vt-model-common.pc DESTINATION ${VT_PKGCONFIG_INSTALL_DIR}
        COMPONENT dev)

# find_package(vt): PACKAGE_INIT computes the prefix from the file's location
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vtConfig.cmake.in
  ${CMAKE_BINARY_DIR}/sdk/vtConfig.cmake
  INSTALL_DESTINATION ${VT_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR VT_PLUGIN_INSTALL_DIR)
# the package version is vt's; the plugin ABI is checked at load (abi_major)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sdk/vtConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_BINARY_DIR}/sdk/vtConfig.cmake ${CMAKE_BINARY_DIR}/sdk/vtConfigVersion.cmake
        DESTINATION ${VT_CMAKE_INSTALL_DIR} COMPONENT dev)
