# packaging.cmake - Debian packages per install component, with CPack's DEB
# generator. Included at the end of the top-level CMakeLists.txt, after every
# install() rule is known.
#
#   component      package           contents
#   vt             vt                libvtcore, the vt command, backend-cpu, residency.yaml
#   dev            vt-dev            headers, libvtcore.so, vt-plugin.pc, find_package(vt)
#   backend-cuda   vt-backend-cuda   backend-cuda.so + .ini        (only if built)
#   backend-rocm   vt-backend-rocm   backend-rocm.so + .ini        (only if built)
#   model-qwen35   vt-model-qwen35   model-qwen35.so + .ini
#   model-gemma4   vt-model-gemma4   model-gemma4.so + .ini
#   store-device   vt-store-device   store-device.so + .ini
#
# Build them:  cmake --build build --target package   (or: cd build && cpack -G DEB)
# Every package but vt depends on vt (= the exact version): the plugin ABI and
# the plugin directory are vt's. The shared-library Depends (libc6, libyaml-0-2,
# libinih1, libutf8proc2, libcjson1, libamdhip64-5 ...) come from dpkg-shlibdeps.
# Each package carries /usr/share/doc/<package>/{copyright,changelog.Debian.gz}
# (install rules EXCLUDE_FROM_ALL: only the packages get them, not a plain
# `cmake --install`). Options: VT_DEB_MAINTAINER, VT_DEB_RELEASE.

set(VT_DEB_MAINTAINER "vt maintainers <maintainers@users.noreply.a-seed-452b795d.example>"
    CACHE STRING "Maintainer field of the Debian packages (Name <address>)")
set(VT_DEB_RELEASE "1" CACHE STRING "Debian revision of the packages (VERSION-RELEASE)")

# The components that exist in this build: a plugin whose toolchain is absent
# has no install rules, hence no package.
set(_vt_pkg_known vt dev backend-cuda backend-rocm model-qwen35 model-gemma4 store-device)
get_cmake_property(_vt_pkg_present COMPONENTS)
set(_vt_pkg_components "")
foreach(_c IN LISTS _vt_pkg_known)
  if(_c IN_LIST _vt_pkg_present)
    list(APPEND _vt_pkg_components ${_c})
  endif()
endforeach()
foreach(_c IN LISTS _vt_pkg_present)
  if(NOT _c IN_LIST _vt_pkg_known)
    message(WARNING "packaging: install component '${_c}' belongs to no Debian package "
                    "(cmake/packaging.cmake knows: ${_vt_pkg_known})")
  endif()
endforeach()

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "vt")
set(CPACK_PACKAGE_VENDOR "vt maintainers")
set(CPACK_PACKAGE_CONTACT "${VT_DEB_MAINTAINER}")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON) # lintian: unstripped-binary-or-object is an error
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${_vt_pkg_components})
set(CPACK_COMPONENTS_GROUPING IGNORE) # one package per component

set(CPACK_DEBIAN_PACKAGE_RELEASE "${VT_DEB_RELEASE}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # name_version-release_arch.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${VT_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON) # DEBIAN/shlibs for libvtcore.so.<major>
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")

set(_vt_pkg_version "${PROJECT_VERSION}-${VT_DEB_RELEASE}")
set(_vt_pkg_needs_vt "vt (= ${_vt_pkg_version})")

# Descriptions: the first line is the synopsis, the rest the extended
# description (CPack indents it; an empty line becomes " .").
set(_vt_pkg_desc_vt
"inference engine for large Mixture-of-Experts models in GGUF files
vt runs Mixture-of-Experts language models stored as GGUF files. A model
whose routed experts do not fit in memory still runs: the experts the router
picks stay resident in a bounded slot cache and misses are read from the file
(expert streaming).

This package holds the core library libvtcore, the vt command, the CPU backend
plugin (scalar, AVX2 and AVX-512 kernels) and the default residency
configuration. Model families, GPU backends and the device expert store are
plugins in their own packages (vt-model-*, vt-backend-*, vt-store-device).")

set(_vt_pkg_desc_dev
"SDK for writing vt plugins
The public plugin ABI headers of vt (include/vt/), the development link
libvtcore.so, the pkg-config file vt-plugin.pc and the CMake package
configuration for find_package(vt), for building backend, model and store
plugins outside vt's source tree.")

set(_vt_pkg_desc_backend-cuda
"NVIDIA CUDA backend plugin for vt
Runs every vt operation as CUDA kernels on NVIDIA GPUs (F32, F16, BF16, Q8_0,
Q4_0..Q5_1, the K-quants, IQ4_NL, IQ4_XS and MXFP4 weights; cuBLAS for
prefill matrix products). Installing it next to vt
adds --device cuda with no rebuild.

The CUDA runtime is linked statically. At run time the plugin needs the
NVIDIA driver's libcuda.so.1 (not a dependency of this package: install the
NVIDIA driver), and for prefill it loads cuBLAS (libcublas.so.13 from the
CUDA 13 toolkit, which is not a Debian package). Without a driver or a GPU the
plugin loads and reports zero devices; without the driver library `vt plugins`
reports the plugin as unloadable with the loader's message.")

set(_vt_pkg_desc_backend-rocm
"AMD ROCm/HIP backend plugin for vt
Runs every vt operation as HIP kernels on AMD GPUs (F32, F16, BF16, Q8_0,
Q4_0..Q5_1, the K-quants, IQ4_NL, IQ4_XS and MXFP4 weights; device code for
gfx90a and gfx1030). Installing it next to vt adds
--device rocm with no rebuild. It links the HIP runtime libamdhip64; without
a supported GPU it loads and reports zero devices.")

set(_vt_pkg_desc_model-qwen35
"Qwen3.5 model plugin for vt
Runs Qwen3.5 models in GGUF files with vt: the Mixture-of-Experts
architecture qwen35moe and the dense qwen35 (Gated DeltaNet layers and gated
attention), with expert streaming.")

set(_vt_pkg_desc_model-gemma4
"Gemma 4 model plugin for vt
Runs Gemma 4 models in GGUF files (architecture gemma4) with vt:
Mixture-of-Experts and dense variants, sliding-window and full attention,
per-layer embeddings and shared KV cache layers.")

set(_vt_pkg_desc_store-device
"device-memory expert store plugin for vt
Keeps vt's streamed expert slots in one arena of the backend's device memory
(GPU memory for the CUDA and ROCm backends), filled from vt's host tier or its
ring of pinned staging buffers (or, with staging 0, its own pinned staging
slot). Works with any backend that declares the memory probe capability.")

set(_vt_pkg_section_dev "libdevel")

# /usr/share/doc/<package>/: copyright and the Debian changelog of this build
string(TIMESTAMP _vt_pkg_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
string(TIMESTAMP _vt_pkg_year "%Y" UTC)
set(_vt_pkg_docdir ${CMAKE_BINARY_DIR}/packaging/doc)
file(WRITE ${_vt_pkg_docdir}/copyright
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: vt
Upstream-Contact: ${VT_DEB_MAINTAINER}
Comment: Built from the vt source tree with CPack (cmake/packaging.cmake).

Files: *
Copyright: ${_vt_pkg_year} the vt authors
License: vt
 No license has been declared for vt yet; until one is, all rights are
 reserved by the vt authors.
")

foreach(_c IN LISTS _vt_pkg_components)
  string(TOUPPER "${_c}" _C)
  if(_c STREQUAL "vt")
    set(_pkg "vt")
    # its demo model (share/vt/models) needs the qwen35 model plugin: what a
    # user installing vt alone expects to run (apt installs Recommends)
    set(_vt_recs "")
    foreach(_m IN ITEMS model-qwen35 model-gemma4)
      if(_m IN_LIST _vt_pkg_components)
        list(APPEND _vt_recs "vt-${_m} (= ${_vt_pkg_version})")
      endif()
    endforeach()
    string(REPLACE ";" ", " _vt_recs "${_vt_recs}")
    set(CPACK_DEBIAN_VT_PACKAGE_RECOMMENDS "${_vt_recs}")
  else()
    set(_pkg "vt-${_c}")
    set(CPACK_DEBIAN_${_C}_PACKAGE_DEPENDS "${_vt_pkg_needs_vt}")
  endif()
  set(CPACK_DEBIAN_${_C}_PACKAGE_NAME "${_pkg}")
  set(CPACK_DEBIAN_${_C}_DESCRIPTION "${_vt_pkg_desc_${_c}}")
  set(CPACK_COMPONENT_${_C}_DESCRIPTION "${_vt_pkg_desc_${_c}}")
  if(_vt_pkg_section_${_c})
    set(CPACK_DEBIAN_${_C}_PACKAGE_SECTION "${_vt_pkg_section_${_c}}")
  endif()

  file(WRITE ${_vt_pkg_docdir}/${_pkg}/changelog.Debian
"${_pkg} (${_vt_pkg_version}) unstable; urgency=medium

  * Built with CPack from the vt source tree, version ${PROJECT_VERSION}.

 -- ${VT_DEB_MAINTAINER}  ${_vt_pkg_date}
")
  # lintian wants it compressed with gzip -9n (no name, no time stamp)
  execute_process(COMMAND gzip -9nf ${_vt_pkg_docdir}/${_pkg}/changelog.Debian
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "packaging: gzip -9n ${_vt_pkg_docdir}/${_pkg}/changelog.Debian failed")
  endif()
  install(FILES ${_vt_pkg_docdir}/copyright ${_vt_pkg_docdir}/${_pkg}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_pkg}
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
          COMPONENT ${_c} EXCLUDE_FROM_ALL)
endforeach()

# libvtcore.so.<major> is in /usr/lib: Debian policy wants the ldconfig trigger
# (lintian: lacks-ldconfig-trigger is an error). CPack 3.25 also writes a
# postinst/postrm that run ldconfig whenever a package has a library in
# /usr/lib, which lintian warns about (maintscript-calls-ldconfig): that one
# warning is overridden, the trigger being what does the work.
if("vt" IN_LIST _vt_pkg_components)
  set(_vt_pkg_ctl ${CMAKE_BINARY_DIR}/packaging/control/vt)
  file(WRITE ${_vt_pkg_ctl}/triggers "activate-noawait ldconfig\n")
  set(CPACK_DEBIAN_VT_PACKAGE_CONTROL_EXTRA ${_vt_pkg_ctl}/triggers)
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/lintian/vt
"# CPack 3.25 generates postinst/postrm calling ldconfig for a library in /usr/lib;
# the package also activates the ldconfig trigger (cmake/packaging.cmake).
vt: maintscript-calls-ldconfig [postinst]
vt: maintscript-calls-ldconfig [postrm]
")
  install(FILES ${CMAKE_BINARY_DIR}/packaging/lintian/vt
          DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
          COMPONENT vt EXCLUDE_FROM_ALL)
endif()

message(STATUS "Debian packages (cpack -G DEB): ${_vt_pkg_components}")
include(CPack)
