# Shared by the scripts that carry troupe's binaries to a machine that has
# none of our Debian packages (gpu-bundle.sh, cpu-bench-bundle.sh): sourced,
# not run.
#
# bundle_libraries LIBDIR BINARY...   copies into LIBDIR every shared library
#   ldd resolves for the binaries that is neither glibc's own (the other
#   machine has a C library, and a bundled one would not match its loader)
#   nor CUDA's, cuDNN's or NCCL's (too large to travel; a GPU machine has
#   them)
# bundle_unresolved LIBPATH BINARY... prints each library that would not be
#   found with only LIBPATH (a colon list) on the library path, or would come
#   from outside it (glibc and CUDA's excepted); returns 1 if any

bundle_is_system() { [[ $1 =~ ^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv)[.-] ]]; }
bundle_is_cuda() { [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver)[._] ]]; }

bundle_libraries() {
  local libdir=$1 binary name path
  shift
  mkdir -p "$libdir"
  for binary in "$@"; do
    while read -r name _ path _; do
      [[ $path == /* ]] || continue
      bundle_is_system "$name" && continue
      bundle_is_cuda "$name" && continue
      [[ -e $libdir/$name ]] || cp -L "$path" "$libdir/$name"
    done < <(ldd "$binary")
  done
}

bundle_unresolved() {
  local libpath=$1 binary line name path problems=0 inside d
  shift
  for binary in "$@"; do
    while read -r line; do
      name=${line%% *}
      path=$(awk '{print $3}' <<<"$line")
      inside=0
      for d in ${libpath//:/ }; do [[ $path == "$d"/* ]] && inside=1; done
      if [[ $line == *"not found"* ]]; then
        bundle_is_cuda "$name" || { echo "  $(basename "$binary"): $name not found" >&2; problems=1; }
      elif [[ $path == /* && $inside == 0 ]] && ! bundle_is_system "$name" && ! bundle_is_cuda "$name"; then
        echo "  $(basename "$binary"): $name resolves outside the bundle ($path)" >&2
        problems=1
      fi
    done < <(LD_LIBRARY_PATH="$libpath" ldd "$binary" | sed 's/^[[:space:]]*//')
  done
  return $problems
}
