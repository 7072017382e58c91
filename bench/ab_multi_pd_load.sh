#!/bin/bash
# multi-pd:2 against one PD (eager) on a program under the ExecuTorch kit's no-op graphExecute, at
# rest and with the other core busy (a busy loop in a process of its own), alternating trees,
# residencies and the two loads round by round in one sitting (bench/ab_multi_pd_noop.py per run).
#   QNNRT_ANCHOR=ANCHOR [ITERATIONS=300] bench/ab_multi_pd_load.sh PTE INPUT ROUNDS TREE[@VAR=VALUE,...]...
# (a tree: a checkout, e.g. `git worktree add BEFORE main`; after @, variables for that tree's runs,
# e.g. `.@QNNRT_SPIN_US=0` for this tree never polling). The kit's shim is given as
# --backend-lib; only QNN_SHIM_REAL of ANCHOR/env.sh is taken, so qnnrt finds nothing else of the
# kit. Per line: round, load, tree, the residency's median iteration and round trips, the load average.
set -e
pte=$1 input=$2 rounds=$3
shift 3
anchor=${QNNRT_ANCHOR:?set QNNRT_ANCHOR to the folder made by bench/anchor/setup.sh}
real=$(bash -c '. "$1" && echo "$QNN_SHIM_REAL"' bash "$anchor/env.sh")
lib=$anchor/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
for r in $(seq "$rounds"); do
  for load in idle busy; do
    hog=
    if [ "$load" = busy ]; then python -c 'while True: pass' & hog=$!; sleep 0.5; fi
    for arg in "$@"; do
      tree=${arg%%@*} vars=
      [ "$tree" != "$arg" ] && vars=${arg#*@}
      for res in eager multi-pd:2; do
        line=$(cd "$tree" && env ${vars//,/ } QNN_SHIM_REAL=$real QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 \
          QNN_SHIM_NOOP_EXEC=1 PYTHONPATH="$tree" python bench/ab_multi_pd_noop.py "$pte" "$input" "$res" \
          --backend-lib "$lib" --iterations "${ITERATIONS:-300}" 2>/dev/null | tail -1)
        echo "$r $load $arg $line | load $(cut -d' ' -f1 /proc/loadavg)"
      done
    done
    if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null || true; fi
  done
done
