#!/bin/bash
# What tracing costs per graph call: alternating runs of bench_dispatch.py on a tree from before
# tracing (untraced: what tracing off must match), this tree untraced (off) and this tree with
# --trace (on), under the anchor shim's no-op graphExecute (qnnrt's own cost, without the simulator).
#   bench/ab_trace.sh ANCHOR BEFORE_TREE AFTER_TREE PROGRAM [INPUT] [ROUNDS] [ITERATIONS]
# ANCHOR: the anchor kit's folder (bench/anchor/README.md); a tree: a checkout, e.g.
# `git archive REV | tar -x -C BEFORE` (give both trees this bench_dispatch.py). Prints, per round
# and run, the medians per iteration (wall | inside the graphExecute C call | CPU ops | the rest)
# and the runtime cost per graph call.
set -e
anchor=$1 before=$2 after=$3 program=$4 input=$5 rounds=${6:-5} iterations=${7:-500}
. "$anchor/env.sh"
lib=$anchor/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
out=$(mktemp -d)
inputs=()
[ -n "$input" ] && inputs=(--inputs "$input")
for r in $(seq "$rounds"); do
  for run in before off on; do
    tree=$after; extra=()
    [ "$run" = before ] && tree=$before
    [ "$run" = on ] && extra=(--trace "$out/trace.json")
    (cd "$tree" && QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 \
      PYTHONPATH="$tree" nice -n 5 python bench/bench_dispatch.py "$program" "${inputs[@]}" \
      --iterations "$iterations" --backend-lib "$lib" --json "$out/r.json" "${extra[@]}" > /dev/null 2>&1)
    python - "$out/r.json" "$r" "$run" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} {sys.argv[3]:>6}: wall {d['wall_ms']:.3f} ms | call {d['accelerator_ms']:.3f} | "
      f"CPU ops {d['cpu_ops_ms']:.3f} | rest {d['runtime_ms']:.3f} | runtime per graph call "
      f"{d['runtime_us_per_graph_call']:.2f} us | all in {d['cpu_us_per_graph_call']:.2f} us | "
      f"load {d['loadavg'][0]}")
PY
  done
done
[ -f "$out/trace.json" ] && python -c "import json,sys; d=json.load(open(sys.argv[1]))['otherData']; \
print(f\"last traced run: {d['events']} events kept, {d['dropped_events']} dropped\")" "$out/trace.json"
ls -l "$out/trace.json" | awk '{print "trace file", $5, "bytes"}'
