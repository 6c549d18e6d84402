#!/usr/bin/env bash
# The compile time of each CUDA file of the library, one at a time (one core each), from a
# configured build tree: the figures of docs/compile_times.md.
#
#   scripts/compile_times.sh [BUILD_DIR]      # default build/ci; prints "seconds  file", slowest first
set -euo pipefail
build="${1:-build/ci}"
[[ -f "$build/build.ninja" ]] || { echo "compile_times: no build.ninja in $build (configure it first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ninja -C "$build" -t targets all | grep -oE '^[^:]+\.cu\.o' | sort -u | while read -r obj; do
  cmd=$(ninja -C "$build" -t commands "$obj" | tail -1)
  cmd=${cmd//" -o $obj "/" -o $tmp/out.o "}
  start=$(date +%s.%N)
  (cd "$build" && eval "$cmd") >/dev/null 2>&1 || echo "compile_times: $obj failed" >&2
  end=$(date +%s.%N)
  src=${obj#*.dir/}
  printf '%6.1f  %s\n' "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "${src%.o}"
done | sort -rn
