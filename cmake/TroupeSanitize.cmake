# TROUPE_SANITIZE instruments every target with one or more sanitizers:
#   address             AddressSanitizer (and LeakSanitizer)
#   undefined           UndefinedBehaviorSanitizer
#   address,undefined   both (what CI builds; "address;undefined" too)
#   thread              ThreadSanitizer (alone: it cannot be combined)
# UBSan is compiled recoverable so that a suppression file can silence a
# finding inside a third-party header (cmake/sanitizers/ubsan.supp, for one
# in CAF 0.17.6); it is made fatal at run time with halt_on_error=1, which
# TROUPE_SANITIZER_ENV below sets for every test (docs/SANITIZERS.md). A
# ThreadSanitizer report makes the process exit with status 66 at its end.
#
# TROUPE_FUZZ (Clang only) adds the libFuzzer targets of fuzz/: it needs
# address and undefined (set by default when TROUPE_SANITIZE is empty), and
# fuzz/CMakeLists.txt adds the coverage instrumentation to the libraries the
# fuzz targets exercise.
set(TROUPE_SANITIZER_ENV "")
if(TROUPE_FUZZ AND NOT TROUPE_SANITIZE)
  set(TROUPE_SANITIZE "address,undefined" CACHE STRING "" FORCE)
endif()
if(TROUPE_SANITIZE)
  string(REPLACE "," ";" _sanitizers "${TROUPE_SANITIZE}")
  list(REMOVE_DUPLICATES _sanitizers)
  foreach(_s IN LISTS _sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "TROUPE_SANITIZE='${TROUPE_SANITIZE}': '${_s}' is not one of address, undefined, thread")
    endif()
  endforeach()
  list(LENGTH _sanitizers _count)
  if("thread" IN_LIST _sanitizers AND _count GREATER 1)
    message(FATAL_ERROR "TROUPE_SANITIZE='${TROUPE_SANITIZE}': thread cannot be combined with another sanitizer")
  endif()
  if(TROUPE_FUZZ AND NOT ("address" IN_LIST _sanitizers AND "undefined" IN_LIST _sanitizers))
    message(FATAL_ERROR "TROUPE_FUZZ needs TROUPE_SANITIZE=address,undefined (got '${TROUPE_SANITIZE}')")
  endif()
  # One value for the rest of the build (tests/CMakeLists.txt, net/control).
  set(TROUPE_SANITIZE_LIST ${_sanitizers})
  list(JOIN _sanitizers "," _joined)
  set(_flags -fsanitize=${_joined} -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_flags}>")
  add_link_options(${_flags})
  # Line tables only (not full debug information): reports name file and
  # line, for a fraction of the compile time and size of -g.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-gline-tables-only>")
  else()
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-g1>")
  endif()

  set(_supp ${PROJECT_SOURCE_DIR}/cmake/sanitizers)
  if("address" IN_LIST _sanitizers)
    # detect_leaks: LeakSanitizer at exit, so a leak fails the test.
    list(APPEND TROUPE_SANITIZER_ENV
         "ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
         "LSAN_OPTIONS=suppressions=${_supp}/lsan.supp:print_suppressions=0")
  endif()
  if("undefined" IN_LIST _sanitizers)
    list(APPEND TROUPE_SANITIZER_ENV
         "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=${_supp}/ubsan.supp")
  endif()
  if("thread" IN_LIST _sanitizers)
    list(APPEND TROUPE_SANITIZER_ENV
         "TSAN_OPTIONS=second_deadlock_stack=1:suppressions=${_supp}/tsan.supp")
  endif()
endif()
