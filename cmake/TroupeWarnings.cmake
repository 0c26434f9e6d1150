# troupe_warnings(target): the warning set every troupe target compiles with.
function(troupe_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TROUPE_WERROR}>>:-Werror>)
endfunction()
