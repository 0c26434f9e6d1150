# What `cmake --install build --prefix P` puts under P (docs/BUILDING.md, "Installing, and the C++ API from your own CMake project"):
#
#   bin/troupe                         the command line
#   lib/libtroupe.so.X.Y.Z             the C++ API, what it uses of the layers below, the backends
#   include/troupe/troupe.hpp          the public header, and under include/troupe/ the
#   include/troupe/{kernels,models}/   kernels/ and models/ headers it includes
#   lib/cmake/troupe/                  the CMake package: find_package(troupe) -> troupe::troupe
#   libexec/troupe/examples/           the example executables
#   share/doc/troupe/examples/         their sources and README
#
# Why one shared library rather than the static layer libraries: a program
# linking static troupe archives would have to link, and so find, everything
# below them (CAF, Boost, OpenSSL, Cap'n Proto, zlib, OpenBLAS, oneDNN,
# OpenMP, CUDA), with troupe's own workarounds for Debian's packages
# (cmake/FindCAF.cmake, the libatomic probe in net/tcp, oneDNN without
# OpenCL), and whole-archive the backend plug so that its registering static
# initialiser is kept. libtroupe.so records those libraries itself, and holds
# the backend plug's object file, so the backends register when it loads.
# The public headers need only the C++ standard library and threads, so the
# package's config finds just Threads (cmake/troupeConfig.cmake.in).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Everything libtroupe.so is made of must be position-independent.
set(_troupe_api_layers troupe_api troupe_nodes troupe_job troupe_actors troupe_ps troupe_push troupe_models troupe_util troupe_collective troupe_transport troupe_tcp
    troupe_cluster troupe_gate troupe_control troupe_crypto troupe_kernels troupe_kernels_cpu troupe_backends)
if(TARGET troupe_kernels_cuda)
  list(APPEND _troupe_api_layers troupe_kernels_cuda)
endif()
set_target_properties(${_troupe_api_layers} PROPERTIES POSITION_INDEPENDENT_CODE ON)

# The library. Its target is troupe_shared (`troupe` is the binary's), its
# file libtroupe.so and its exported name troupe::troupe. The object files of
# the layers whose headers are installed (api, models, kernels) are all in
# it, so that every function those headers declare is there, not only those
# the API calls; the archives below them contribute what is used. (Linking
# those three archives whole instead repeats them on the link line, as CMake
# does for static libraries, and defines their symbols twice.)
# troupe_backends is an OBJECT library: linked directly, its object file is
# always in.
add_library(troupe_shared SHARED $<TARGET_OBJECTS:troupe_api> $<TARGET_OBJECTS:troupe_models>
            $<TARGET_OBJECTS:troupe_kernels>)
target_link_libraries(troupe_shared PRIVATE troupe_api troupe_backends)
set_target_properties(troupe_shared PROPERTIES
  OUTPUT_NAME troupe
  EXPORT_NAME troupe
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  # A dependency outside the default search path (CUDA under /usr/local/cuda)
  # stays findable from the installed library and executables.
  INSTALL_RPATH_USE_LINK_PATH ON)
target_include_directories(troupe_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/api>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/troupe>)
target_link_libraries(troupe_shared INTERFACE Threads::Threads)
target_compile_features(troupe_shared INTERFACE cxx_std_17)
add_library(troupe::troupe ALIAS troupe_shared)

# ---- what is installed ---------------------------------------------------------
set_target_properties(troupe PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS troupe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TROUPE_BUILD_EXAMPLES)  # off in the sanitizer builds of CI
  set(_troupe_examples mirrored_fashion_mnist custom_loop text_cnn model_parallel mode_switch_experiment multiworker
      ps_linear_regression elastic)
  set_target_properties(${_troupe_examples} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ${_troupe_examples} RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/troupe/examples)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
          FILES_MATCHING PATTERN "*.cpp" PATTERN "*.hpp" PATTERN "README.md")
endif()

install(TARGETS troupe_shared EXPORT troupeTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The public header and the kernels/ and models/ headers it includes
# (tests/install compiles every installed header with the installed include
# folders alone, so a header that includes one not installed is caught).
install(FILES ${PROJECT_SOURCE_DIR}/api/troupe/troupe.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe)
foreach(_dir kernels models models/data models/checkpoint models/layers)
  file(GLOB _headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${_dir}/*.hpp)
  install(FILES ${_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/${_dir})
endforeach()

set(_troupe_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${_troupe_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/troupeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/troupeConfig.cmake INSTALL_DESTINATION ${_troupe_cmake_dir})
# 0.x: another minor version may change the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/troupeConfig.cmake ${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
        DESTINATION ${_troupe_cmake_dir})
