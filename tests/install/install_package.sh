#!/usr/bin/env bash
# The installed troupe, used as a user outside the tree uses it:
#
#   tests/install/install_package.sh BUILD_DIR SOURCE_DIR CMAKE GENERATOR VERSION CXX
#
# installs BUILD_DIR (already built: nothing is compiled again) into a
# temporary prefix with `cmake --install`, then checks
#   1. the files: bin/troupe, libtroupe.so, the headers, the CMake package,
#      the examples;
#   2. the installed binary and an example run from there, and no installed
#      file names BUILD_DIR or SOURCE_DIR (the package is relocatable);
#   3. every installed header compiles with the installed include folders only;
#   4. a small project in a temporary folder (tests/install/consumer, its own
#      CMakeLists.txt with find_package(troupe 0.1 REQUIRED)) builds against
#      the package, links the installed libtroupe.so, and trains TF1's linear
#      regression on two replicas to the slope 2 and bias 0 it was drawn
#      from; find_package(troupe 9) is refused.
# Prints what it checks; exits 1 with "FAIL: ..." at the first thing wrong.
set -euo pipefail

if [ $# -ne 6 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR CMAKE GENERATOR VERSION CXX" >&2
  exit 2
fi
build=$1 source=$2 cmake=$3 generator=$4 version=$5 cxx=$6
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() {
  echo "install_package: FAIL: $*" >&2
  exit 1
}
step() { echo "install_package: $*"; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || {
  cat "$work/install.log"
  fail "cmake --install failed"
}

# ---- 1. the files -----------------------------------------------------------------
for f in bin/troupe include/troupe/troupe.hpp include/troupe/kernels/tensor.hpp include/troupe/models/trainer.hpp \
         share/doc/troupe/examples/README.md share/doc/troupe/examples/custom_loop.cpp; do
  [ -e "$prefix/$f" ] || fail "no $f under the prefix"
done
config=$(find "$prefix" -name troupeConfig.cmake)
[ -n "$config" ] || fail "no troupeConfig.cmake under the prefix"
package_dir=$(dirname "$config")
for f in troupeConfigVersion.cmake troupeTargets.cmake; do
  [ -e "$package_dir/$f" ] || fail "no $f beside $config"
done
library=$(find "$prefix" -name "libtroupe.so.$version")
[ -n "$library" ] || fail "no libtroupe.so.$version under the prefix"
[ -L "$(dirname "$library")/libtroupe.so" ] || fail "no libtroupe.so link beside $library"
examples="mirrored_fashion_mnist custom_loop text_cnn model_parallel mode_switch_experiment multiworker
          ps_linear_regression elastic"
for e in $examples; do
  [ -x "$prefix/libexec/troupe/examples/$e" ] || fail "no example $e in $prefix/libexec/troupe/examples"
done
step "installed: $(cd "$prefix" && find . -type f | wc -l) files ($(du -sh "$prefix" | cut -f1)), the package in ${package_dir#"$prefix"/}"

# ---- 2. the installed programs run, and nothing points back into the tree ----------
first=$("$prefix/bin/troupe" --version | head -1)
[ "$first" = "troupe $version" ] || fail "installed troupe --version says '$first', expected 'troupe $version'"
"$prefix/libexec/troupe/examples/custom_loop" --help > "$work/example-help.log" 2>&1 ||
  fail "the installed custom_loop --help failed: $(cat "$work/example-help.log")"
# The installed elastic example runs the installed troupe, not the build tree's.
"$prefix/libexec/troupe/examples/elastic" --help 2>&1 | grep -qF "(default $prefix/bin/troupe)" ||
  fail "the installed elastic does not default to $prefix/bin/troupe: $("$prefix/libexec/troupe/examples/elastic" --help 2>&1 | grep -- --troupe)"
for binary in "$prefix/bin/troupe" "$library"; do
  if ldd "$binary" | grep -q "not found"; then
    fail "$binary needs a library that is not found: $(ldd "$binary" | grep "not found")"
  fi
done
if grep -rlF -e "$build" -e "$source" "$package_dir" "$prefix/include" > "$work/refs.txt"; then
  fail "installed files name the build or source tree: $(tr '\n' ' ' < "$work/refs.txt")"
fi
step "troupe --version: $first; custom_loop --help runs; elastic runs the installed troupe; no installed file names the build or source tree"

# ---- 3. the installed headers compile with the installed include folders alone ---------
(cd "$prefix/include" && find troupe -name '*.hpp' | sort | sed 's/.*/#include <&>/') > "$work/all_headers.cpp"
headers=$(wc -l < "$work/all_headers.cpp")
"$cxx" -std=c++17 -fsyntax-only -I"$prefix/include" -I"$prefix/include/troupe" "$work/all_headers.cpp" \
  > "$work/headers.log" 2>&1 || {
  cat "$work/headers.log"
  fail "the installed headers do not compile with the installed include folders alone"
}
step "all $headers installed headers compile with -I include -I include/troupe"

# ---- 4. a program outside the tree, built with find_package(troupe) ---------------------
cp -r "$here/consumer" "$work/consumer"
"$cmake" -S "$work/consumer" -B "$work/consumer-build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" 2>&1 || {
  cat "$work/configure.log"
  fail "configuring the consumer project with find_package(troupe) failed"
}
"$cmake" --build "$work/consumer-build" > "$work/build.log" 2>&1 || {
  cat "$work/build.log"
  fail "building the consumer project failed"
}
app=$work/consumer-build/fit_linreg
linked=$(ldd "$app" | awk '/libtroupe\.so/ {print $3}')
[ "$(readlink -f "$linked")" = "$(readlink -f "$library")" ] ||
  fail "fit_linreg loads libtroupe from '$linked', not the installed $library"
step "consumer built with find_package(troupe) and linked to ${linked#"$prefix"/}"

"$app" > "$work/fit.log" 2>&1 || {
  cat "$work/fit.log"
  fail "fit_linreg failed"
}
value() { awk -v key="$1" '$1 == key {print $2}' "$work/fit.log"; }
check() {  # check NAME CONDITION (awk, on x)
  local v
  v=$(value "$1")
  [ -n "$v" ] || { cat "$work/fit.log"; fail "fit_linreg printed no '$1'"; }
  awk -v x="$v" "BEGIN { exit !($2) }" || { cat "$work/fit.log"; fail "fit_linreg: $1 = $v, expected $2"; }
}
check replicas "x == 2"
check steps "x == 150"
check test_loss "x > 0 && x < 0.2"         # the noise alone: 0.33^2 = 0.11
check slope "x > 1.8 && x < 2.2"           # y = 2x + noise
check bias "x > -0.2 && x < 0.2"
check "f(0.5)" "x > 0.8 && x < 1.2"
step "fit_linreg: $(tr '\n' ' ' < "$work/fit.log")"

# A version the package does not have is refused.
mkdir -p "$work/wrong-version"
printf 'cmake_minimum_required(VERSION 3.16)\nproject(v LANGUAGES CXX)\nfind_package(troupe 9.0 REQUIRED)\n' \
  > "$work/wrong-version/CMakeLists.txt"
if "$cmake" -S "$work/wrong-version" -B "$work/wrong-version/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
     -DCMAKE_PREFIX_PATH="$prefix" > "$work/wrong-version.log" 2>&1; then
  fail "find_package(troupe 9.0 REQUIRED) was accepted by troupe $version"
fi
grep -q "troupe" "$work/wrong-version.log" || fail "find_package(troupe 9.0) failed without naming troupe"
step "find_package(troupe 9.0 REQUIRED) is refused"
step "PASS"
