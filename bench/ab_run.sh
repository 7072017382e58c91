#!/bin/bash
# `qnnrt run`, the command users benchmark with, against ExecuTorch's runtime on the same .pte with the
# ExecuTorch kit's no-op graphExecute, alternating in one sitting: each round runs `qnnrt run` in each
# tree given (its own qnnrt: PYTHONPATH), then ExecuTorch (bench_et_cpu.py in the kit's venv).
#   QNNRT_ANCHOR=ANCHOR [ITERATIONS=300] bench/ab_run.sh PTE INPUT ROUNDS TREE...
# (a tree: a checkout, e.g. `git worktree add BEFORE main`; ANCHOR: `bash bench/anchor/setup.sh ANCHOR`,
# bench/anchor/README.md). Per line: the median iteration wall (`qnnrt run`'s latency_ms median over
# ITERATIONS after 20 warm-up; ExecuTorch's wall median, 5 warm-up), it per graph call, the ratio to the
# round's ExecuTorch run, `qnnrt run`'s runtime_us_per_graph_call (its time breakdown) and the load
# average. The last lines: per tree, the median of the rounds' ratios (min-max).
set -e
pte=$1 input=$2 rounds=$3; shift 3
iterations=${ITERATIONS:-300}
anchor=${QNNRT_ANCHOR:?set QNNRT_ANCHOR to the folder made by bench/anchor/setup.sh (or . ANCHOR/env.sh)}
. "$anchor/env.sh"
lib=$anchor/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
for r in $(seq "$rounds"); do
  i=0
  for tree in "$@"; do
    i=$((i + 1))
    (cd "$tree" && QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 \
      PYTHONPATH="$tree" python -m qnnrt.cli run "$pte" --inputs "$input" --iteration "$iterations" \
      --warm-up 20 --backend-lib "$lib" --quiet --report "$out/run$i.json" > /dev/null 2>&1)
  done
  et=$(QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 "$ET_PY" "$here/bench_et_cpu.py" "$pte" --inputs "$input" \
    --graph-calls 1 --iterations "$iterations" 2>&1 | grep "wall median" | sed -E 's/.*wall median ([0-9.]+) ms.*/\1/')
  i=0
  for tree in "$@"; do
    i=$((i + 1))
    python - "$out/run$i.json" "$r" "$tree" "$et" <<'PY' | tee -a "$out/lines"
import json, os, sys
d = json.load(open(sys.argv[1]))
tb, wall, et = d["time_breakdown"], d["latency_ms"]["median"], float(sys.argv[4])
calls = tb["graph_calls_per_iteration"]
print(f"{sys.argv[2]} {sys.argv[3]}: qnnrt run {wall:.4f} ms ({wall * 1e3 / calls:.3f} us per graph call), "
      f"ExecuTorch {et:.4f} ms ({et * 1e3 / calls:.3f} us): ratio {wall / et:.3f} | breakdown "
      f"{tb['runtime_us_per_graph_call']:.2f} us per graph call ({tb.get('sampled_iterations', 'all')} sampled) "
      f"| load {os.getloadavg()[0]:.2f}")
PY
  done
done
python - "$out/lines" "$@" <<'PY'
import re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
for tree in sys.argv[2:]:
    rs = [float(re.search(r"ratio ([0-9.]+)", x).group(1)) for x in lines if f" {tree}: " in x]
    print(f"{tree}: qnnrt run / ExecuTorch, median of {len(rs)} rounds {statistics.median(rs):.3f}x "
          f"({min(rs):.3f}-{max(rs):.3f})")
PY
