#!/usr/bin/env bash
# The bench's mini-batch cases for two source trees on one GPU host, in
# alternating rounds: a baseline tree (e.g. a `git worktree` of the commit
# before a change, its src/ copied into a carried folder) and this checkout.
#
#   bash scripts/ab_minibatch.sh BASELINE_SRC OUTDIR
#
# Both trees use the same native library ($PYG_IOAWARE_NATIVE_LIB, else the
# prebuilt .native/libpyg_ioaware_native.so) and host extension
# ($PYG_IOAWARE_HOST_LIB, if set), unless BASE_NATIVE_LIB / BASE_HOST_LIB
# name the baseline's own (a change to the native ABI).
# Environment: CASES (default "gcn-no-loops,sage-mean"), SIZES ("all"),
# DTYPES ("fp32,bf16"), ITERS (40), WARMUP (8), ROUNDS (1: baseline then
# this tree; 2: baseline, this tree, baseline, this tree).
# Writes OUTDIR/{base,new}-ROUND/ (the bench's JSON and summary) and a table
# of PyG / ours and new / same graph per row, every round, last.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BASELINE_SRC OUTDIR" >&2
  exit 2
fi
BASE_SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUTDIR=$(cd "$2" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PYTHONUNBUFFERED=1
export PYG_IOAWARE_REQUIRE_NATIVE=1
export PYG_IOAWARE_NATIVE_LIB=${PYG_IOAWARE_NATIVE_LIB:-$ROOT/.native/libpyg_ioaware_native.so}

for round in $(seq 1 "${ROUNDS:-1}"); do
  for tree in base new; do
    src=$([[ $tree == base ]] && echo "$BASE_SRC" || echo "$ROOT/src")
    lib=$PYG_IOAWARE_NATIVE_LIB
    host=${PYG_IOAWARE_HOST_LIB:-}
    if [[ $tree == base ]]; then
      lib=${BASE_NATIVE_LIB:-$lib}
      host=${BASE_HOST_LIB:-$host}
    fi
    echo "=== round $round, $tree: $src"
    PYG_IOAWARE_NATIVE_LIB=$lib PYG_IOAWARE_HOST_LIB=$host PYTHONPATH=$src python -m pyg_ioaware.bench --cases none --minibatch "${SIZES:-all}" \
      --minibatch-cases "${CASES:-gcn-no-loops,sage-mean}" --dtypes "${DTYPES:-fp32,bf16}" \
      --iters "${ITERS:-40}" --warmup "${WARMUP:-8}" --out "$OUTDIR/$tree-$round" \
      > "$OUTDIR/$tree-$round.log" 2>&1
    echo "exit $?"
  done
done

python - "$OUTDIR" <<'EOF'
import json, pathlib, sys
rows = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json")):
    for row in json.loads(path.read_text())["minibatch"]["comparisons"]:
        key = (row["batch"], row["case"], row["precision"])
        rows.setdefault(key, []).append((path.parent.name, row))
fmt = lambda v: f"{v:7.2f}" if isinstance(v, (int, float)) else f"{'-':>7}"
print(f"{'batch':7} {'case':30} {'dtype':5} {'run':7} {'ours':>7} {'pyg':>7} {'same':>7} "
      f"{'pyg/ours':>8} {'new/same':>8}")
for (batch, case, precision), runs in rows.items():
    for name, row in runs:
        print(f"{batch:7} {case:30} {precision:5} {name:7} {fmt(row.get('ours_ms'))} "
              f"{fmt(row.get('pyg_ms'))} {fmt(row.get('same_graph_ms'))} "
              f"{fmt(row.get('pyg_over_ours'))}x {fmt(row.get('new_over_same_graph'))}")
EOF
