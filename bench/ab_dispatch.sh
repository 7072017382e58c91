#!/bin/bash
# Alternating before / after / ExecuTorch runs with the ExecuTorch kit's shim's no-op graphExecute:
# each round runs bench_dispatch.py in the before tree and in the after tree (each tree's own copy),
# then ExecuTorch's runtime on the same .pte (bench_et_cpu.py in the kit's venv).
#   QNNRT_ANCHOR=ANCHOR [ITERATIONS=300] bench/ab_dispatch.sh BEFORE_TREE AFTER_TREE PTE INPUT [ROUNDS]
# (a tree: a checkout, e.g. `git worktree add BEFORE main`). ANCHOR: the folder made by
# `bash bench/anchor/setup.sh ANCHOR` (after `. ANCHOR/env.sh`, QNNRT_ANCHOR is set already);
# bench/anchor/README.md. Per line: median iteration wall and this thread's CPU time per graph call,
# of timed runs (Program.timed: the time_breakdown columns) and, where the tree has them, of
# untimed ones (the default), interleaved one by one; the load average.
set -e
before=$1 after=$2 pte=$3 input=$4 rounds=${5:-5} iterations=${ITERATIONS:-300}
anchor=${QNNRT_ANCHOR:?set QNNRT_ANCHOR to the folder made by bench/anchor/setup.sh (or . ANCHOR/env.sh)}
. "$anchor/env.sh"
lib=$anchor/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
for r in $(seq "$rounds"); do
  for tree in "$before" "$after"; do
    (cd "$tree" && QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 \
      PYTHONPATH="$tree" python bench/bench_dispatch.py "$pte" --inputs "$input" \
      --iterations "$iterations" --backend-lib "$lib" --json "$out/r.json" > /dev/null 2>&1)
    calls=$(python -c "import json; print(json.load(open('$out/r.json'))['graph_calls'])")
    python - "$out/r.json" "$r" "$tree" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
line = (f"{sys.argv[2]} {sys.argv[3]}: timed wall {d['wall_ms']:.3f} ms, CPU {d['cpu_us_per_graph_call']:.2f} us"
        f" | graphExecute {d['accelerator_ms']:.3f} | CPU ops {d['cpu_ops_ms']:.3f} | rest {d['runtime_ms']:.3f}")
if "untimed_wall_ms" in d:
    line += f" | untimed wall {d['untimed_wall_ms']:.3f} ms, CPU {d['untimed_cpu_us_per_graph_call']:.2f} us"
print(line + f" | load {d['loadavg'][0]}")
PY
  done
  et=$(QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 "$ET_PY" "$here/bench_et_cpu.py" "$pte" --inputs "$input" \
    --graph-calls "$calls" --iterations "$iterations" 2>&1 | grep "wall median")
  echo "$r ExecuTorch: $(echo "$et" | sed -E 's/.*wall median ([0-9.]+) ms.*all in[^:]*: ([0-9.]+) us.*/wall \1 ms, CPU \2 us/') | load $(cut -d' ' -f1 /proc/loadavg)"
done
