# TROUPE_SANITIZE=address|undefined|thread instruments every target.
if(TROUPE_SANITIZE)
  if(NOT TROUPE_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "TROUPE_SANITIZE='${TROUPE_SANITIZE}': expected address, undefined or thread")
  endif()
  set(_flags -fsanitize=${TROUPE_SANITIZE} -fno-omit-frame-pointer)
  if(TROUPE_SANITIZE STREQUAL "undefined")
    list(APPEND _flags -fno-sanitize-recover=all)
  endif()
  # Quoted: unquoted, the ;-list splits the generator expression in two.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_flags}>")
  add_link_options(${_flags})
endif()
