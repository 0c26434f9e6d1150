# Included by models/CMakeLists.txt: generates the C++ for checkpoint.capnp
# into the build tree and compiles it into troupe_models.
#
# The generated files land in <build>/models/capnp-generated/models/checkpoint/
# and are included as "models/checkpoint/checkpoint.capnp.h". That directory
# is a SYSTEM include, and the generated .c++ is compiled without the troupe
# warning set, so -Werror applies to our code only.
#
# Debian's CapnProtoConfig.cmake probes libatomic with check_library_exists(),
# whose test program does not compile as C++ (GCC's __atomic_load_8 builtin
# clashes with it) and troupe enables only CXX, so the probe always fails
# with "libatomic not found". Find the library ourselves and answer the probe.
if(NOT FOUND_LIBATOMIC)
  find_library(TROUPE_LIBATOMIC NAMES atomic libatomic.so.1 REQUIRED)
  set(FOUND_LIBATOMIC TRUE CACHE INTERNAL "libatomic found by models/checkpoint/schema.cmake")
endif()
find_package(CapnProto CONFIG REQUIRED)

set(CAPNPC_SRC_PREFIX ${PROJECT_SOURCE_DIR})
set(CAPNPC_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR}/capnp-generated)
file(MAKE_DIRECTORY ${CAPNPC_OUTPUT_DIR})
capnp_generate_cpp(_checkpoint_capnp_sources _checkpoint_capnp_headers
                   ${CMAKE_CURRENT_LIST_DIR}/checkpoint.capnp)
set_source_files_properties(${_checkpoint_capnp_sources} PROPERTIES COMPILE_OPTIONS "-w")
target_sources(troupe_models PRIVATE ${_checkpoint_capnp_sources} ${_checkpoint_capnp_headers})
target_include_directories(troupe_models SYSTEM PRIVATE ${CAPNPC_OUTPUT_DIR})
target_link_libraries(troupe_models PRIVATE CapnProto::capnp)
unset(CAPNPC_SRC_PREFIX)
unset(CAPNPC_OUTPUT_DIR)
