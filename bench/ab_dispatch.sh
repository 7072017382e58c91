#!/bin/bash
# Alternating before/after runs of bench_dispatch.py with the ExecuTorch kit's shim's no-op graphExecute.
#   QNNRT_ANCHOR=ANCHOR bench/ab_dispatch.sh BEFORE_TREE AFTER_TREE PTE INPUT [ROUNDS]
# (a tree: a checkout, e.g. `git archive REV | tar -x -C /tmp/before`; give both trees this
# bench_dispatch.py). ANCHOR: the folder made by `bash bench/anchor/setup.sh ANCHOR` (after
# `. ANCHOR/env.sh`, QNNRT_ANCHOR is set already); bench/anchor/README.md.
set -e
before=$1 after=$2 pte=$3 input=$4 rounds=${5:-5}
anchor=${QNNRT_ANCHOR:?set QNNRT_ANCHOR to the folder made by bench/anchor/setup.sh (or . ANCHOR/env.sh)}
. "$anchor/env.sh"
lib=$anchor/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
out=$(mktemp -d)
for r in $(seq "$rounds"); do
  for tree in "$before" "$after"; do
    (cd "$tree" && QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 \
      PYTHONPATH="$tree" nice -n 5 python bench/bench_dispatch.py "$pte" --inputs "$input" \
      --iterations 500 --backend-lib "$lib" --json "$out/r.json" > /dev/null 2>&1)
    python - "$out/r.json" "$r" "$tree" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} {sys.argv[3]}: wall {d['wall_ms']:.3f} ms | call {d['accelerator_ms']:.3f} | "
      f"CPU ops {d['cpu_ops_ms']:.3f} | rest {d['runtime_ms']:.3f} | all in "
      f"{d['cpu_us_per_graph_call']:.2f} us | load {d['loadavg'][0]}")
PY
  done
done
