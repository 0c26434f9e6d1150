#!/usr/bin/env bash
# The include directions of the layers (docs/ARCHITECTURE.md, "Layers"):
#
#   cli/ api/ -> cluster/ -> job/ -> actors/ -> models/ net/ -> kernels/ util/
#
# A file of a folder on the left may include the folders below in this
# table, a file of one on the right never one on its left. Fails, naming the
# file, the line and the include, on an include the table does not allow.
# tests/, bench/ and fuzz/ may include everything; examples/ only what the
# installed package has (api's troupe/, kernels/, models/, util/), as a
# user's program would. scripts/test.sh runs it, so CI does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

declare -A may=(
  [util]="util"
  [kernels]="kernels util"
  [models]="models kernels util"
  [net]="net kernels util"
  [actors]="actors models net kernels util"
  [job]="job actors models net kernels util"
  [cluster]="cluster job actors models net kernels util"
  [api]="api troupe cluster job actors models net kernels util"
  [cli]="cli api troupe cluster job actors models net kernels util"
  [examples]="troupe kernels models util"
)

if git rev-parse --git-dir > /dev/null 2>&1; then
  # Tracked and new files, less those deleted but not yet committed.
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' |
    while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
else
  mapfile -t files < <(find . -path ./build\* -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||')
fi

bad=0 checked=0
for f in "${files[@]}"; do
  top=${f%%/*}
  [[ -n "${may[$top]:-}" ]] || continue  # tests/, bench/, fuzz/: anything
  checked=$((checked + 1))
  while IFS=: read -r line inc; do
    inc=${inc#*\"}
    inc=${inc%%\"*}
    [[ "$inc" == */* ]] || continue  # a file beside this one
    to=${inc%%/*}
    [[ " ${may[$top]} " == *" $to "* ]] && continue
    echo "check-includes: $f:$line includes \"$inc\": $top/ may include only ${may[$top]// /, }" >&2
    bad=$((bad + 1))
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done
if ((bad)); then
  echo "check-includes: $bad includes against the layers' direction (the table in scripts/check-includes.sh)" >&2
  exit 1
fi
echo "check-includes: $checked files, every include in the layers' direction"
