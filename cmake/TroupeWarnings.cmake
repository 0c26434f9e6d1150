# troupe_warnings(target): the warning set every troupe target compiles with.
# -Wshadow=local is GCC's (the scripts' build, with -Werror, enforces it);
# Clang, which builds the sanitizer and fuzz targets, has no such option.
# (The flags keep their order, so GCC's command lines are unchanged.)
function(troupe_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TROUPE_WERROR}>>:-Werror>)
endfunction()
