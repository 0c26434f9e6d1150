# FindCAF: the C++ Actor Framework, which Debian 12 ships (libcaf-dev 0.17.6)
# without any CMake package or pkg-config file.
#
# Defines CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR and the imported targets
# CAF::core and CAF::io (io links core and Threads).
#
# TROUPE_CAF_ROOT, when set, is the only place looked at: a CAF 0.17.6
# installed there from Debian's source package, e.g. the ThreadSanitizer
# build of scripts/build-caf-tsan.sh (static libcaf_core_static.a and
# libcaf_io_static.a, whose atomics TSan then sees; docs/SANITIZERS.md).
# A build directory configured before with another root forgets what it found.
if(NOT "${TROUPE_CAF_ROOT}" STREQUAL "${_TROUPE_CAF_ROOT_FOUND_WITH}")
  unset(CAF_INCLUDE_DIR CACHE)
  unset(CAF_CORE_LIBRARY CACHE)
  unset(CAF_IO_LIBRARY CACHE)
  set(_TROUPE_CAF_ROOT_FOUND_WITH "${TROUPE_CAF_ROOT}" CACHE INTERNAL "")
endif()
if(TROUPE_CAF_ROOT)
  find_path(CAF_INCLUDE_DIR caf/all.hpp PATHS "${TROUPE_CAF_ROOT}/include" NO_DEFAULT_PATH)
  find_library(CAF_CORE_LIBRARY NAMES caf_core_static caf_core PATHS "${TROUPE_CAF_ROOT}/lib" NO_DEFAULT_PATH)
  find_library(CAF_IO_LIBRARY NAMES caf_io_static caf_io PATHS "${TROUPE_CAF_ROOT}/lib" NO_DEFAULT_PATH)
else()
  find_path(CAF_INCLUDE_DIR caf/all.hpp)
  find_library(CAF_CORE_LIBRARY caf_core)
  find_library(CAF_IO_LIBRARY caf_io)
endif()

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  # config.hpp: #define CAF_VERSION 1706  ->  0.17.6
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE ".*CAF_VERSION ([0-9]+).*" "\\1" _caf_v "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_v} / 10000")
  math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
  math(EXPR _caf_patch "${_caf_v} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_INCLUDE_DIR
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  if(NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY)
