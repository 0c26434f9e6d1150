#!/usr/bin/env bash
# Fails, naming each file and its first differing lines, when clang-format
# (.clang-format at the root) would change a C++ or CUDA file of the tree.
# Every tracked file is checked, so a changed file always is; the whole tree
# takes a few seconds. scripts/test.sh runs it, so CI does.
#
#   scripts/check-format.sh          check
#   scripts/check-format.sh --fix    rewrite the files that differ
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v clang-format > /dev/null || { echo "check-format: clang-format is not installed (Debian's clang-format; scripts/setup.sh installs it)" >&2; exit 1; }

if git rev-parse --git-dir > /dev/null 2>&1; then
  # Tracked and new files, less those deleted but not yet committed.
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' |
    while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
else
  mapfile -t files < <(find . -path ./build\* -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi

if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi

# One clang-format for the whole tree; it names every line it would change.
bad=()
if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: (error|warning)' <<< "$out" | cut -d: -f1 | sort -u)
  ((${#bad[@]})) || { echo "$out" | head -20 >&2; echo "check-format: clang-format failed" >&2; exit 1; }
fi
if ((${#bad[@]})); then
  for f in "${bad[@]:0:20}"; do
    echo "check-format: $f is not formatted:" >&2
    clang-format "$f" | diff -u "$f" - | sed -n '3,12p' >&2 || true
  done
  ((${#bad[@]} > 20)) && echo "check-format: ... and $((${#bad[@]} - 20)) more" >&2
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format: run scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
