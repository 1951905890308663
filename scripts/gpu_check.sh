#!/usr/bin/env bash
# One command for a GPU host: native library, CUDA tests, memcheck, quick bench.
#
#   bash scripts/gpu_check.sh OUTDIR
#
# Runs from a source checkout with PYTHONPATH=src (no pip install, no network).
# The native library is $PYG_IOAWARE_NATIVE_LIB if set, else the prebuilt
# .native/libpyg_ioaware_native.so if present, else built here with CMake into
# /tmp/pygio-lib (FORCE_BUILD=1 builds even when a prebuilt copy exists).
# .native/ is git-ignored: a prebuilt library reaches the GPU host only when
# carried there explicitly (build it on the CPU host with the same cmake line
# and -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=$PWD/.native).
#
# Stages (env STAGES, default "tests memcheck bench"; the native check always runs):
#   native   the native library loads and torch sees a GPU (else CUDA tests would skip)
#   tests    python -m pytest -q tests $TEST_ARGS (CPU and CUDA tests) -> OUTDIR/tests.log
#   memcheck compute-sanitizer $SANITIZER_FLAGS python -m pytest -q tests -m cuda
#            -k "$SANITIZER_TESTS" (default: the small sanitizer tests, the
#            property test's fp32 and bf16 GPU sample, both index widths)
#                                                                  -> OUTDIR/memcheck.log
#            (CUDA-graph capture tests cannot run here: without torch's caching
#            allocator every allocation is a cudaMalloc, forbidden while capturing)
#   bench    python -m pyg_ioaware.bench --out OUTDIR/bench $BENCH_ARGS
#            (BENCH_ARGS unset: "--quick"; set to "" for the full suite)  -> OUTDIR/bench.log
# Every stage runs even if an earlier one failed; STAGE_TIMEOUT (seconds, 0 =
# none) bounds each. A summary table (stage, status, seconds) is printed last,
# after OUTDIR/bench/summary.txt if the bench wrote one. Exit status 1 if any
# stage failed.
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
OUTDIR=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

STAGES=${STAGES:-"tests memcheck bench"}
SANITIZER_TESTS=${SANITIZER_TESTS:-"sanitizer or small or (property_sample and (fp32 or bf16)) or native_self_loops or native_transpose"}
# API errors are not reported: torch itself makes CUDA calls that fail on
# purpose (probing), which would read as errors. Kernel memory errors are.
SANITIZER_FLAGS=${SANITIZER_FLAGS:-"--tool memcheck --error-exitcode 86 --report-api-errors no"}
BENCH_ARGS=${BENCH_ARGS-"--quick"}  # set but empty: the full default suite
TEST_ARGS=${TEST_ARGS:-""}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-0}
PYTHON=${PYTHON:-python}
export PYTHONUNBUFFERED=1
# CUDA tests fail, rather than fall back to plain torch, without the native library.
export PYG_IOAWARE_REQUIRE_NATIVE=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

NAMES=()
STATUSES=()
SECS=()
FAILED=0

# record NAME RC SECONDS [NOTE]
record() {
  local status
  case "$2" in
    0) status="ok" ;;
    5) status="FAIL (rc=5: no tests collected)" ;;
    86) status="FAIL (sanitizer found errors)" ;;
    *) status="FAIL (rc=$2)" ;;
  esac
  if [[ "$STAGE_TIMEOUT" -gt 0 && ( "$2" -eq 124 || "$2" -eq 137 ) ]]; then
    status="FAIL (timed out after ${STAGE_TIMEOUT}s)"
  fi
  [[ -n "${4:-}" ]] && status="$status $4"
  [[ "$2" -ne 0 ]] && FAILED=1
  NAMES+=("$1")
  STATUSES+=("$status")
  SECS+=("$3")
  echo "=== stage $1: $status (${3}s)"
}

# run_stage NAME LOGFILE CMD...: runs CMD, output teed to LOGFILE, and records it.
run_stage() {
  local name=$1 log=$2 start rc
  shift 2
  echo "=== stage $name: $*" | tee "$log"
  start=$(date +%s)
  if [[ "$STAGE_TIMEOUT" -gt 0 ]]; then
    timeout --kill-after=30 "$STAGE_TIMEOUT" "$@" 2>&1 | tee -a "$log"
  else
    "$@" 2>&1 | tee -a "$log"
  fi
  rc=${PIPESTATUS[0]}
  record "$name" "$rc" "$(( $(date +%s) - start ))"
}

# ------------------------------------------------------------ native library
PREBUILT="$ROOT/.native/libpyg_ioaware_native.so"
if [[ -n "${PYG_IOAWARE_NATIVE_LIB:-}" ]]; then
  echo "native library: \$PYG_IOAWARE_NATIVE_LIB=$PYG_IOAWARE_NATIVE_LIB (set by the caller)"
elif [[ -f "$PREBUILT" && "${FORCE_BUILD:-0}" != 1 ]]; then
  export PYG_IOAWARE_NATIVE_LIB="$PREBUILT"
  echo "native library: prebuilt $PREBUILT"
  newer=$(find cuda CMakeLists.txt -newer "$PREBUILT" -type f 2>/dev/null | head -5)
  if [[ -n "$newer" ]]; then
    echo "WARNING: sources newer than the prebuilt library (rebuild it, or FORCE_BUILD=1):"
    echo "$newer" | sed 's/^/  /'
  fi
else
  run_stage build "$OUTDIR/build.log" bash -c \
    'cmake -S . -B /tmp/pygio-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=/tmp/pygio-lib &&
     cmake --build /tmp/pygio-build -j "$(nproc)"'
  export PYG_IOAWARE_NATIVE_LIB=/tmp/pygio-lib/libpyg_ioaware_native.so
  echo "native library: built $PYG_IOAWARE_NATIVE_LIB"
fi

# ------------------------------------------------------------- environment
{
  echo "=== environment"
  nvidia-smi -L || echo "nvidia-smi failed"
  nvcc --version 2>/dev/null | tail -1
  "$PYTHON" - <<'EOF'
import torch, torch_geometric
print(f"python torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"torch_geometric {torch_geometric.__version__}, "
      f"cuda available: {torch.cuda.is_available()}")
EOF
} 2>&1 | tee "$OUTDIR/env.log"

NATIVE_CHECK='
import sys, torch, pyg_ioaware
path = pyg_ioaware.native_library_path()
print(f"pyg_ioaware {pyg_ioaware.__version__}: native library {path}, "
      f"cuda_available() = {pyg_ioaware.cuda_available()}")
if not pyg_ioaware.cuda_available():
    sys.exit("the native library is not in use: CUDA tests would only skip")
'
run_stage native "$OUTDIR/native.log" "$PYTHON" -c "$NATIVE_CHECK"

# ------------------------------------------------------------------ stages
for stage in $STAGES; do
  case "$stage" in
    tests)
      # shellcheck disable=SC2086  # TEST_ARGS is split on purpose
      run_stage tests "$OUTDIR/tests.log" \
        "$PYTHON" -m pytest -q tests $TEST_ARGS
      ;;
    memcheck)
      # shellcheck disable=SC2086
      run_stage memcheck "$OUTDIR/memcheck.log" \
        env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer $SANITIZER_FLAGS \
        "$PYTHON" -m pytest -q tests -m cuda -k "$SANITIZER_TESTS"
      ;;
    bench)
      # shellcheck disable=SC2086
      run_stage bench "$OUTDIR/bench.log" \
        "$PYTHON" -m pyg_ioaware.bench --out "$OUTDIR/bench" $BENCH_ARGS
      ;;
    *)
      echo "unknown stage '$stage' (known: tests memcheck bench)"
      record "$stage" 2 0 "(unknown stage)"
      ;;
  esac
done

# ----------------------------------------------------------------- summary
if [[ -f "$OUTDIR/bench/summary.txt" ]]; then
  echo
  echo "=== $OUTDIR/bench/summary.txt"
  cat "$OUTDIR/bench/summary.txt"
fi
{
  echo
  echo "=== summary (logs in $OUTDIR)"
  printf '%-10s %8s  %s\n' stage seconds status
  for i in "${!NAMES[@]}"; do
    printf '%-10s %8s  %s\n' "${NAMES[$i]}" "${SECS[$i]}" "${STATUSES[$i]}"
  done
} | tee "$OUTDIR/summary.txt"
exit "$FAILED"
