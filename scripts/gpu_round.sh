#!/usr/bin/env bash
# One GPU round, run from the repository root on the GPU machine (H200, sm_90a):
#
#   build      configure + build Release for sm_90a: library, tests, Python module, benchmarks
#   ctest      every test (GPU ones included); passed / failed / skipped counts
#   bench      build/bench/rudnn_bench (the C++ harness; table + CSV)
#   side       python3 bench/side_by_side.py (ruDNN's Python package against torch, one process)
#   memcheck   compute-sanitizer --tool memcheck over the GPU tests
#   racecheck  compute-sanitizer --tool racecheck over a smaller filter, with the time left
#   pip        (RUN_PIP=1 only) pip install --no-build-isolation . into a temporary target
#
# The steps run in that order (the benchmarks before the sanitizers, so that a slow sanitizer
# cannot crowd the figures out of the time budget). A step that fails does not stop the
# ones after it that can still run; the script exits 1 if any step failed.
#
# Logs go to $OUT (default ./out), eight files at most (the device tool returns no more):
#   build.log ctest.log sanitizer.log bench.txt bench.csv side_by_side.txt side_by_side.csv summary.txt
# stdout gets one line per step and, last, the two benchmark tables.
#
# Needs ./.deps from scripts/prepare_device_deps.sh (dlpack.h, GoogleTest sources): the
# device call must name ".deps" in carry.
#
# Knobs (environment):
#   STEPS="build ctest bench side memcheck racecheck"   steps to run (comma or space separated;
#                                                        "sanitizer" = memcheck racecheck)
#   SKIP_BUILD=1        drop `build` (reuse BUILD_DIR from an earlier call on a warm machine)
#   RUN_PIP=1           add `pip`
#   OUT=./out  BUILD_DIR=./build-gpu  JOBS=16  CTEST_JOBS=8  ARCHS=90a  PYTHON=python3
#   PY_MODULE=1         build the Python module (0: off); off by itself when python/ lacks it
#   TIME_BUDGET=570     seconds for the whole round; each step is capped by what is left
#   BUILD_TIMEOUT=330 CTEST_TIMEOUT=240 BENCH_TIMEOUT=150 SIDE_TIMEOUT=210
#   MEMCHECK_TIMEOUT=150 RACECHECK_TIMEOUT=180 PIP_TIMEOUT=300   per-step caps, seconds
#   CTEST_ARGS=""       more ctest arguments (e.g. "-R NormGpu")
#   MEMCHECK_FILTER='*Gpu*:AttentionHopper*:PagedMlaTc*-*TensorsBeyondTwoToThe31Elements*'
#                       gtest filter for memcheck (the Hopper suites' names lack "Gpu")
#   MEMCHECK_CORE=1     also memcheck rudnn_core_tests with MEMCHECK_CORE_FILTER='*Gpu*'
#   RACECHECK_FILTER='NormGpu.SoftmaxAndLogSumExp:NormGpu.RmsNormBackward:NormGpu.LayerNormBackward:NormGpu.CrossEntropyForwardBackwardAndFused'
#   RACECHECK_MORE='attention|AttentionHopper.StridedViewsAndOutputs paged_attention|PagedMlaTcWgmma.DecodeMatchesTheReference'
#                       more racecheck runs, "family|filter" each: the kernels whose warpgroups
#                       hand shared memory over through mbarriers and named barriers
#   BENCH_ARGS=""       more rudnn_bench arguments (e.g. "--quick")
#   SIDE_ARGS=""        more side_by_side.py arguments (e.g. "--filter cross")
#   RUDNN_PYTHONPATH    where `import rudnn` comes from (default: the build tree's python/)
#   CMAKE_EXTRA=""      more configure arguments
#   BUILD_TARGETS=""    build only these targets (e.g. "rudnn_attention_tests rudnn_bench"); all if empty
#
#   scripts/gpu_round.sh --fingerprint   prints only the source fingerprint that the round
#                                        records, to compare with the developers' tree
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
START=$SECONDS

# A hash of the sources that the round builds and runs (the GPU machine's copy may carry no
# .git): the same command on the developers' machine tells whether the same sources ran.
fingerprint() {
  find CMakeLists.txt cmake include src bench tests python scripts -type f \
    \( -name '*.h' -o -name '*.cuh' -o -name '*.cu' -o -name '*.cpp' -o -name '*.py' -o -name '*.txt' \
    -o -name '*.sh' -o -name '*.cmake' -o -name '*.in' \) -not -path '*/__pycache__/*' 2>/dev/null |
    LC_ALL=C sort | xargs cat 2>/dev/null | sha1sum | cut -c1-12
}
if [[ "${1:-}" == --fingerprint ]]; then
  fingerprint
  exit 0
fi

OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-16}"
CTEST_JOBS="${CTEST_JOBS:-8}"
ARCHS="${ARCHS:-90a}"
PYTHON="${PYTHON:-python3}"
PY_MODULE="${PY_MODULE:-1}"
TIME_BUDGET="${TIME_BUDGET:-570}"
RESERVE=8   # seconds kept for the summary
MEMCHECK_FILTER="${MEMCHECK_FILTER:-*Gpu*:AttentionHopper*:PagedMlaTc*-*TensorsBeyondTwoToThe31Elements*}"
MEMCHECK_CORE="${MEMCHECK_CORE:-1}"
MEMCHECK_CORE_FILTER="${MEMCHECK_CORE_FILTER:-*Gpu*}"
RACECHECK_FILTER="${RACECHECK_FILTER:-NormGpu.SoftmaxAndLogSumExp:NormGpu.RmsNormBackward:NormGpu.LayerNormBackward:NormGpu.CrossEntropyForwardBackwardAndFused}"
RACECHECK_MORE="${RACECHECK_MORE-attention|AttentionHopper.StridedViewsAndOutputs paged_attention|PagedMlaTcWgmma.DecodeMatchesTheReference}"

STEPS="${STEPS:-build ctest bench side memcheck racecheck}"
STEPS=" ${STEPS//,/ } "
STEPS="${STEPS// sanitizer / memcheck racecheck }"
STEPS="${STEPS// side_by_side / side }"
[[ "${SKIP_BUILD:-0}" == 1 ]] && STEPS="${STEPS// build / }"
[[ "${RUN_PIP:-0}" == 1 && "$STEPS" != *" pip "* ]] && STEPS="$STEPS pip "
want() { [[ "$STEPS" == *" $1 "* ]]; }

SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
FAILED_STEPS=()
INCOMPLETE_STEPS=()  # skipped for time, or cut short with no error found: not failures
say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $((SECONDS - START)); }
# The timeout for a step: its cap, or what is left of the budget when that is less.
cap() {
  local left=$((TIME_BUDGET - (SECONDS - START) - RESERVE)) want=$1
  ((want < 1)) && want=1
  ((left < 1)) && left=1
  ((left < want)) && echo "$left" || echo "$want"
}
# result STEP STATUS DETAIL: one summary line; STATUS FAIL marks the round failed.
result() {
  local step=$1 status=$2
  shift 2
  say "$(printf '%-10s %-8s %s' "$step" "$status" "$*")"
  [[ "$status" == FAIL ]] && FAILED_STEPS+=("$step")
  [[ "$status" == SKIPPED || "$status" == PARTIAL ]] && INCOMPLETE_STEPS+=("$step")
  return 0
}
# run_logged LOG SECONDS CMD...: appends the command's output to LOG under a timeout.
run_logged() {
  local log=$1 t=$2
  shift 2
  {
    echo
    echo "==== $(date -u '+%H:%M:%S') \$ $*"
  } >>"$log"
  timeout -k 10 "$t" "$@" >>"$log" 2>&1
}
# start_step STEP CAP: sets STEP_T to the step's timeout, or reports the step SKIPPED and
# returns 1 when too little of the budget is left.
STEP_T=0
start_step() {
  STEP_T=$(cap "$2")
  if ((STEP_T < 15)); then
    result "$1" SKIPPED "no time left in TIME_BUDGET=$TIME_BUDGET s"
    return 1
  fi
}

# ---- The machine --------------------------------------------------------------------------
{
  echo "gpu_round $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname 2>/dev/null || echo '?'); steps:$STEPS"
  if git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
    echo "commit $(git -C "$ROOT" rev-parse HEAD) ($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) paths differ from it)"
  fi
  echo "source fingerprint $(fingerprint) (scripts/gpu_round.sh --fingerprint on the developers' machine)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' || echo "gpu: nvidia-smi failed"
  echo "nvcc $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | grep -m1 -o 'release [0-9.]*')"
  echo "cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}'), ninja $(ninja --version 2>/dev/null)"
  "$PYTHON" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)' 2>/dev/null ||
    echo "python: torch/triton import failed"
} | tee -a "$SUMMARY"

# ---- build ----------------------------------------------------------------------------------
if want build; then
  log="$OUT/build.log"
  : >"$log"
  if start_step build "${BUILD_TIMEOUT:-330}"; then
    t=$STEP_T
    t0=$SECONDS
    py_flags=(-DRUDNN_PYTHON=OFF)
    py_note="Python module off"
    if [[ "$PY_MODULE" == 1 ]]; then
      if [[ ! -f "$ROOT/python/CMakeLists.txt" ]]; then
        py_note="Python module off (python/CMakeLists.txt missing)"
      elif ! pyb=$("$PYTHON" -m pybind11 --cmakedir 2>/dev/null); then
        py_note="Python module off ($PYTHON -m pybind11 failed)"
      else
        py_flags=(-DRUDNN_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "$PYTHON")" "-Dpybind11_DIR=$pyb")
        py_note="Python module on"
      fi
    fi
    cuda_flags=()
    if command -v nvcc >/dev/null 2>&1; then
      cuda_flags=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
      cuda_flags=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
    fi
    if [[ ! -f "$ROOT/.deps/include/dlpack/dlpack.h" || ! -f "$ROOT/.deps/googletest/CMakeLists.txt" ]]; then
      echo "missing .deps: run scripts/prepare_device_deps.sh on the developers' machine and carry .deps" >>"$log"
      result build FAIL ".deps missing (scripts/prepare_device_deps.sh, carry .deps)"
    else
      # shellcheck disable=SC2086
      run_logged "$log" "$t" cmake -S "$ROOT" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DRUDNN_CUDA=ON "-DRUDNN_CUDA_ARCHS=$ARCHS" \
        -DRUDNN_BUILD_TESTS=ON -DRUDNN_BUILD_BENCH=ON -DRUDNN_BUILD_DEMO=ON \
        "${py_flags[@]}" "${cuda_flags[@]}" \
        "-DDLPACK_INCLUDE_DIR=$ROOT/.deps/include" "-DRUDNN_GTEST_SOURCE_DIR=$ROOT/.deps/googletest" \
        ${CMAKE_EXTRA:-}
      rc=$?
      if ((rc == 0)); then
        # -k 0: build every target that can be built, so that one broken target does not
        # keep the others (and the steps that use them) from running.
        targets=()
        for tg in ${BUILD_TARGETS:-}; do targets+=(--target "$tg"); done
        run_logged "$log" "$(cap "$((t - (SECONDS - t0)))")" cmake --build "$BUILD" -j "$JOBS" "${targets[@]}" -- -k 0
        rc=$?
      fi
      built=()
      [[ -x "$BUILD/bench/rudnn_bench" ]] && built+=(rudnn_bench)
      for t in "$BUILD"/tests/cpp/*/rudnn_*_tests; do [[ -x "$t" ]] && built+=("$(basename "$t")"); done
      compgen -G "$BUILD/python/rudnn/_rudnn*.so" >/dev/null && built+=(_rudnn)
      detail="$((SECONDS - t0)) s, Release sm_$ARCHS, $py_note; built: ${built[*]:-nothing}"
      if ((rc == 0)); then
        result build ok "$detail"
      else
        ((rc == 124 || rc == 137)) && detail="TIMEOUT after ${t} s; $detail"
        result build FAIL "rc $rc; $detail"
        grep -m 8 -E 'error|Error|FAILED:' "$log" | cut -c1-220 | sed 's/^/    /' | tee -a "$SUMMARY"
      fi
    fi
  fi
fi

# ---- ctest ----------------------------------------------------------------------------------
if want ctest; then
  log="$OUT/ctest.log"
  : >"$log"
  if [[ ! -f "$BUILD/CTestTestfile.cmake" ]]; then
    result ctest FAIL "no build at $BUILD"
  elif start_step ctest "${CTEST_TIMEOUT:-240}"; then
    t=$STEP_T
    t0=$SECONDS
    # shellcheck disable=SC2086
    run_logged "$log" "$t" ctest --test-dir "$BUILD" --output-on-failure -j "$CTEST_JOBS" ${CTEST_ARGS:-}
    rc=$?
    total=$(grep -oE 'tests? failed out of [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
    failed=$(grep -oE '[0-9]+ tests? failed out of' "$log" | tail -1 | grep -oE '^[0-9]+')
    skipped=$(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' "$log")
    ran=$(grep -cE 'Test +#[0-9]+: ' "$log")
    if [[ -z "$total" ]]; then  # cut short: count the lines so far
      total=$ran
      failed=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)|Test +#[0-9]+: .*Not Run' "$log")
    fi
    passed=$((total - failed - skipped))
    # Suites named *Gpu run on a GPU; *CpuOnly ones skip there by design.
    gpu_skipped=$(grep -E 'Test +#[0-9]+: .*\*\*\*Skipped' "$log" | grep -cE '#[0-9]+: [A-Za-z0-9_]*Gpu\.')
    detail="$passed passed, $failed failed, $skipped skipped (of them GPU tests: $gpu_skipped), $total in all, $((SECONDS - t0)) s"
    # The Python tests run as one ctest test per tests/python folder; pytest's own counts,
    # one line per folder, are in ctest's log.
    pyline=$(grep -hE '^=*.*[0-9]+ (passed|failed|skipped|error).* in [0-9.]+s' "$BUILD/Testing/Temporary/LastTest.log" 2>/dev/null | sed 's/=//g; s/^ *//; s/ *$//' | paste -sd '|' | sed 's/|/ | /g')
    [[ -n "$pyline" ]] && detail="$detail; pytest: $pyline"
    if ((rc == 0)); then
      result ctest ok "$detail"
    else
      ((rc == 124 || rc == 137)) && detail="TIMEOUT after $t s (counts so far); $detail"
      result ctest FAIL "$detail"
      grep -A 40 'The following tests FAILED' "$log" | grep -E '^\s+[0-9]+ - ' | head -15 | sed 's/^\s*/    /' | tee -a "$SUMMARY"
    fi
    ((gpu_skipped > 0)) && say "    note: $gpu_skipped GPU-suite tests skipped on the GPU machine (multi-GPU tests skip on one GPU; more means no usable device)"
    # The full per-test output too (ctest keeps it in the build tree, which does not come back).
    if [[ -f "$BUILD/Testing/Temporary/LastTest.log" ]]; then
      { echo; echo "==== LastTest.log (every test's output)"; cat "$BUILD/Testing/Temporary/LastTest.log"; } >>"$log"
    fi
  fi
fi

# ---- bench: the C++ harness -----------------------------------------------------------------
if want bench; then
  log="$OUT/bench.txt"
  : >"$log"
  rm -f "$OUT/bench.csv"
  if [[ ! -x "$BUILD/bench/rudnn_bench" ]]; then
    result bench FAIL "no $BUILD/bench/rudnn_bench"
  elif start_step bench "${BENCH_TIMEOUT:-150}"; then
    t=$STEP_T
    t0=$SECONDS
    # shellcheck disable=SC2086
    run_logged "$log" "$t" "$BUILD/bench/rudnn_bench" --csv "$OUT/bench.csv" ${BENCH_ARGS:-}
    rc=$?
    bad=$(sed -n '/^op  /,$p' "$log" | grep -cE 'FAILED|ERROR')
    detail="$((SECONDS - t0)) s; $(grep -m1 '^copy bandwidth' "$log")"
    if ((rc == 0)); then
      result bench ok "$detail"
    else
      ((rc == 124 || rc == 137)) && detail="TIMEOUT after $t s; $detail"
      result bench FAIL "rc $rc, $bad rows FAILED/ERROR; $detail"
      grep -hm 3 '^rudnn_bench:' "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
    fi
  fi
fi

# ---- side: ruDNN's Python package against torch ---------------------------------------------------
python_path() {
  if [[ -n "${RUDNN_PYTHONPATH:-}" ]]; then
    echo "$RUDNN_PYTHONPATH"
  elif [[ -f "$BUILD/python/rudnn/__init__.py" ]]; then
    echo "$BUILD/python"
  else
    local init
    init=$(find "$BUILD" -path '*/rudnn/__init__.py' -not -path '*/_deps/*' 2>/dev/null | head -1)
    [[ -n "$init" ]] && dirname "$(dirname "$init")" || echo "$ROOT/python"
  fi
}
if want side; then
  log="$OUT/side_by_side.txt"
  : >"$log"
  rm -f "$OUT/side_by_side.csv"
  if start_step side "${SIDE_TIMEOUT:-210}"; then
    t=$STEP_T
    t0=$SECONDS
    pp=$(python_path)
    echo "PYTHONPATH=$pp" >>"$log"
    # shellcheck disable=SC2086
    PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
      run_logged "$log" "$t" "$PYTHON" "$ROOT/bench/side_by_side.py" --csv "$OUT/side_by_side.csv" ${SIDE_ARGS:-}
    rc=$?
    detail="$((SECONDS - t0)) s; $(grep -m1 -E '^rudnn: ' "$log" | cut -c1-160); $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)"
    # No table line: the script stopped early; its last words say why.
    grep -qE '^[0-9]+ passed, [0-9]+ failed' "$log" || detail="$detail; last line: $(grep -v '^\s*$' "$log" | tail -1 | cut -c1-160)"
    if ((rc == 0)); then
      result side ok "$detail"
    else
      ((rc == 124 || rc == 137)) && detail="TIMEOUT after $t s; $detail"
      result side FAIL "rc $rc; $detail"
    fi
  fi
fi

# ---- memcheck / racecheck -----------------------------------------------------------------------
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
SANLOG="$OUT/sanitizer.log"
if want memcheck || want racecheck; then : >"$SANLOG"; fi
# sanitize TOOL BINARY FILTER SECONDS: one run; sets SAN_DETAIL and returns 0 clean, 1 found
# errors or failed tests, 2 timed out with no error found so far.
sanitize() {
  local tool=$1 bin=$2 filter=$3 t=$4 rc mark errs hazards gpass gfail
  mark=$(wc -l <"$SANLOG")
  run_logged "$SANLOG" "$t" "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 100 --report-api-errors no \
    "$bin" "--gtest_filter=$filter" --gtest_brief=1
  rc=$?
  local part
  part=$(tail -n +"$((mark + 1))" "$SANLOG")
  errs=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' <<<"$part" | tail -1 | grep -oE '[0-9]+')
  hazards=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' <<<"$part" | tail -1 | grep -oE '[0-9]+')
  gpass=$(grep -oE '\[  PASSED  \] [0-9]+ test' <<<"$part" | tail -1 | grep -oE '[0-9]+')
  gfail=$(grep -oE '\[  FAILED  \] [0-9]+ test' <<<"$part" | tail -1 | grep -oE '[0-9]+')
  SAN_DETAIL="$(basename "$bin") '$filter': gtest ${gpass:-?} passed ${gfail:-0} failed"
  [[ -n "$errs" ]] && SAN_DETAIL="$SAN_DETAIL, $errs errors"
  [[ -n "$hazards" ]] && SAN_DETAIL="$SAN_DETAIL, $hazards hazards"
  if ((rc == 124 || rc == 137)); then
    SAN_DETAIL="$SAN_DETAIL, TIMEOUT after $t s"
    grep -qE '========= (Invalid|Error|Race)|\[  FAILED  \]' <<<"$part" && return 1
    return 2
  fi
  ((rc == 0)) && return 0
  SAN_DETAIL="$SAN_DETAIL, rc $rc"
  return 1
}
san_step() {  # san_step STEP TOOL CAP BIN:FILTER...
  local step=$1 tool=$2 capsec=$3 t t0 status=ok details=() r mark
  shift 3
  mark=$(wc -l <"$SANLOG")
  if [[ -z "$SANITIZER" ]]; then
    result "$step" FAIL "compute-sanitizer not found"
    return
  fi
  t0=$SECONDS
  for spec in "$@"; do
    local bin=${spec%%|*} filter=${spec#*|}
    if [[ ! -x "$bin" ]]; then
      status=FAIL
      details+=("no $bin")
      continue
    fi
    t=$(cap "$((capsec - (SECONDS - t0)))")
    if ((t < 15)); then
      details+=("$(basename "$bin"): no time left")
      [[ $status == ok ]] && status=PARTIAL
      continue
    fi
    sanitize "$tool" "$bin" "$filter" "$t"
    r=$?
    details+=("$SAN_DETAIL")
    if ((r == 1)); then status=FAIL; elif ((r == 2)) && [[ $status == ok ]]; then status=PARTIAL; fi
  done
  # PARTIAL: cut short by its time cap with no error found so far (not a failure).
  result "$step" "$status" "$((SECONDS - t0)) s; $(IFS=';'; echo "${details[*]}")"
  tail -n +"$((mark + 1))" "$SANLOG" | grep -m 6 -E '^========= (Invalid|Error|Race|Program hit)' | cut -c1-200 |
    sed 's/^/    /' | tee -a "$SUMMARY"
}
if want memcheck; then
  # Every family's test binary (the core's is MEMCHECK_CORE's).
  specs=()
  for t in "$BUILD"/tests/cpp/*/rudnn_*_tests; do
    [[ -x "$t" && "$t" != */rudnn_core_tests ]] && specs+=("$t|$MEMCHECK_FILTER")
  done
  ((${#specs[@]})) || specs=("$BUILD/tests/cpp/normalization/rudnn_normalization_tests|$MEMCHECK_FILTER")
  [[ "$MEMCHECK_CORE" == 1 ]] && specs+=("$BUILD/tests/cpp/core/rudnn_core_tests|$MEMCHECK_CORE_FILTER")
  if start_step memcheck "${MEMCHECK_TIMEOUT:-150}"; then
    san_step memcheck memcheck "${MEMCHECK_TIMEOUT:-150}" "${specs[@]}"
  fi
fi
if want racecheck; then
  if start_step racecheck "${RACECHECK_TIMEOUT:-180}"; then
    specs=("$BUILD/tests/cpp/normalization/rudnn_normalization_tests|$RACECHECK_FILTER")
    for more in $RACECHECK_MORE; do
      specs+=("$BUILD/tests/cpp/${more%%|*}/rudnn_${more%%|*}_tests|${more#*|}")
    done
    san_step racecheck racecheck "${RACECHECK_TIMEOUT:-180}" "${specs[@]}"
  fi
fi

# ---- pip: the wheel build, into a temporary target ---------------------------------------------------
if want pip; then
  log="$OUT/build.log"  # appended: the eight-file limit
  if start_step pip "${PIP_TIMEOUT:-300}"; then
    t=$STEP_T
    t0=$SECONDS
    target=$(mktemp -d /tmp/rudnn-pip.XXXXXX)
    CMAKE_ARGS="-DDLPACK_INCLUDE_DIR=$ROOT/.deps/include -DRUDNN_CUDA_ARCHS=$ARCHS ${CMAKE_EXTRA:-}" \
      CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
      run_logged "$log" "$t" "$PYTHON" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir \
      --target "$target" "$ROOT"
    rc=$?
    if ((rc == 0)); then
      (cd /tmp && PYTHONPATH="$target" run_logged "$log" 60 "$PYTHON" -c '
import rudnn, torch
x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
y = rudnn.rms_norm(x, eps=1e-6)
ref = torch.nn.functional.rms_norm(x.float(), (1024,), None, 1e-6)
err = ((y.float() - ref).norm() / ref.norm()).item()
print("pip-installed rudnn", rudnn.__file__, "rms_norm rel err", err)
assert err < 1e-2
')
      rc=$?
      if ((rc == 0)); then
        result pip ok "$((SECONDS - t0)) s; installed into $target and imported (rms_norm checked)"
      else
        result pip FAIL "$((SECONDS - t0)) s; installed but the import check failed (build.log)"
      fi
    else
      result pip FAIL "rc $rc, $((SECONDS - t0)) s (build.log)"
    fi
  fi
fi

# ---- summary ------------------------------------------------------------------------------------
{
  if [[ -s "$OUT/bench.txt" ]] && grep -q '^op  ' "$OUT/bench.txt"; then
    echo
    echo "== rudnn_bench"
    grep -m1 '^device:' "$OUT/bench.txt"
    grep -m1 '^copy bandwidth' "$OUT/bench.txt"
    sed -n '/^op  /,/^$/p' "$OUT/bench.txt"
  fi
  if [[ -s "$OUT/side_by_side.txt" ]] && grep -q '^case  ' "$OUT/side_by_side.txt"; then
    echo
    echo "== side_by_side.py"
    sed -n '/^case  /,/^ratio = /p' "$OUT/side_by_side.txt"
  fi
  echo
  if ((${#FAILED_STEPS[@]})); then
    echo "gpu_round: FAILED steps: ${FAILED_STEPS[*]} ($(elapsed) s; logs in $OUT)"
  else
    echo "gpu_round: no step failed${INCOMPLETE_STEPS[*]:+ (incomplete, for time: ${INCOMPLETE_STEPS[*]})} ($(elapsed) s; logs in $OUT)"
  fi
} | tee -a "$SUMMARY"
((${#FAILED_STEPS[@]} == 0))
