#!/usr/bin/env bash
# Prepares ./.deps on the developers' machine for a GPU round: the GPU machine has no
# dlpack.h and no GoogleTest sources, and cannot download them. scripts/gpu_round.sh builds
# with -DDLPACK_INCLUDE_DIR=.deps/include and -DRUDNN_GTEST_SOURCE_DIR=.deps/googletest.
#
#   scripts/prepare_device_deps.sh            # then carry ".deps" with the device call
#
# .deps/ is git-ignored; it travels only when the device call names it in `carry`.
# Sources (override with the variables): DLPACK_HEADER, GTEST_SOURCE_DIR.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/.deps"
dlpack_header="${DLPACK_HEADER:-/usr/include/dlpack/dlpack.h}"
gtest_src="${GTEST_SOURCE_DIR:-/usr/src/googletest}"

[[ -f "$dlpack_header" ]] || { echo "prepare_device_deps: $dlpack_header not found (apt-get install libdlpack-dev)" >&2; exit 1; }
[[ -f "$gtest_src/CMakeLists.txt" ]] || { echo "prepare_device_deps: $gtest_src/CMakeLists.txt not found (apt-get install googletest)" >&2; exit 1; }

mkdir -p "$deps/include/dlpack"
cp -f "$dlpack_header" "$deps/include/dlpack/dlpack.h"
rm -rf "$deps/googletest"
cp -r "$gtest_src" "$deps/googletest"
rm -rf "$deps/googletest/.git"

if git -C "$root" rev-parse --git-dir >/dev/null 2>&1 && ! git -C "$root" check-ignore -q "$deps"; then
  echo "prepare_device_deps: warning: .deps/ is not git-ignored; it would travel as an untracked folder" >&2
fi
ver="$(grep -m1 -E '#define DLPACK_VERSION ' "$deps/include/dlpack/dlpack.h" | awk '{print $3}')"
echo "prepared $deps: dlpack.h (DLPACK_VERSION ${ver:-?}), googletest from $gtest_src ($(du -sh "$deps" | cut -f1) in all)"
