#!/usr/bin/env bash
# The test command: configure, build (CUDA code compiled where nvcc exists), run the C++ and
# Python tests; then the same for a CPU-only build (C++ and Python tests again, preset cpu-only).
# GPU tests report "skipped" without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --workflow --preset ci
cmake --workflow --preset cpu-only
