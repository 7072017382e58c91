"""Instructions per graph call of qnnrt or ExecuTorch's runtime on a .pte, with the kit's no-op
graphExecute, counted by valgrind's callgrind: a count that does not depend on the machine's load,
for A/B comparisons on a busy machine (wall time does).

    bash bench/anchor/setup.sh ANCHOR                  # the kit: bench/anchor/README.md
    python bench/callgrind_chain.py CHAIN/chain66_et.pte --inputs CHAIN/chain66_et_input_0.npy \\
        --graph-calls 66 --runtime qnnrt|executorch [--timed] [--tree TREE] [--anchor ANCHOR]
    python bench/callgrind_chain.py MODEL.pte --llm [--tree TREE]       # per LLM decode step
    python bench/callgrind_chain.py CHAIN/chain66_et.pte ... --residency multi-pd:2 [--pd-budget 400MB] [--workers]
    python bench/callgrind_chain.py CHAIN/chain66_et.pte ... --cli       # `qnnrt run`'s loop

`--residency multi-pd:2`: the main process's own instructions per iteration; with `--workers` its
PD workers' too (valgrind --trace-children=yes, each worker instrumented over the same iterations,
the sum of all processes is reported beside the main process's), else the workers run natively.
Neither side polls (QNNRT_SPIN_US=0), so what is counted is work, not how long a side waited.

`--cli`: `qnnrt run PTE --inputs ... --iteration N --warm-up 5` in-process (QNNRT_NO_FORK=1), counted
from the end of its load to the program's close (the warm-up, the loop, the report over N iterations):
the difference of two N is what `qnnrt run` costs per iteration, its time breakdown included.

`--llm`: qnnrt's LLM runner (the prepared step, contexts created up front) generating from the
37-token prompt of bench_llm_host.py; a count is one `generate` of N tokens, and the difference
of two (`--iterations 1,65` by default) per extra token is the host work of one decode step
(sampling included).

Each count is one process under callgrind, instrumented only around N timed iterations (after the
load and 5 warm-up iterations: `callgrind_control -i on`, then a dump); a second process with
more iterations, and the difference between the two divided by the extra iterations and graph
calls, takes out whatever the toggling costs. `--iterations 100,300` (default). qnnrt runs
untimed (Program's default) unless `--timed`; `--tree` runs another checkout's qnnrt (its folder
first on PYTHONPATH), e.g. `git worktree add BEFORE main`. ExecuTorch runs in the kit's venv.
Needs valgrind (callgrind_control on PATH). A run takes minutes (the load runs uninstrumented).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))   # after PYTHONPATH: --tree's qnnrt first

from bench.anchor.kit import QNNRT_SHIM_ENV, add_anchor_argument, anchor_dir, kit_env, shim_lib


def _toggle(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], stdout=subprocess.DEVNULL,
                   check=False)


def child_llm(pte: str, n: int, shim: str) -> None:
    """Under callgrind: the LLM runner, one warm-up generation, then one of N tokens instrumented."""
    import qnnrt
    from qnnrt.llm import LlmRunner
    prog = qnnrt.load(pte, backend_lib=shim)
    runner = LlmRunner(prog, prepared=True, create_contexts=True)
    prompt = [(7 * i + 3) % 500 + 1 for i in range(37)]   # bench_llm_host.py's
    runner.generate(prompt, 4, eos_ids=[])
    _toggle("-i", "on")
    runner.generate(prompt, n, eos_ids=[])
    _toggle("-d")
    _toggle("-i", "off")
    prog.close()


def _children() -> list[int]:
    """This process's child processes (its PD workers), from /proc."""
    out: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def child_cli(pte: str, inputs: str, n: int, shim: str) -> int:
    """Under callgrind: `qnnrt run` in this process, instrumented from the end of its load on."""
    os.environ["QNNRT_NO_FORK"] = "1"
    from qnnrt.cli import main as cli_main
    from qnnrt.cli import run as cli_run
    opened = cli_run.open_program

    def open_program(*a, **k):   # type: ignore[no-untyped-def]
        got = opened(*a, **k)
        close = got[0].close

        def counted_close() -> None:   # the loop and the report are done: dump, then close
            _toggle("-d")
            _toggle("-i", "off")
            close()
        got[0].close = counted_close
        _toggle("-i", "on")
        return got
    cli_run.open_program = open_program
    return cli_main.main(["run", pte, "--inputs", inputs, "--iteration", str(n), "--warm-up", "5",
                          "--backend-lib", shim, "--quiet"])


def child(runtime: str, pte: str, inputs: str, n: int, timed: bool, shim: str, residency: str,
          pd_budget: str | None, workers: bool) -> None:
    """Under callgrind: load, warm up, then N iterations with instrumentation on (in this process
    and, with `workers`, in its PD workers)."""
    import numpy as np
    arrays = [np.load(p) for p in inputs.split(",")]
    if runtime == "executorch":
        import torch
        from executorch.runtime import Runtime
        meth = Runtime.get().load_program(pte).load_method("forward")
        xs = [torch.from_numpy(a) for a in arrays]

        def once() -> None:
            meth.execute(xs)
    else:
        import qnnrt
        prog = qnnrt.load(pte, residency=residency, backend_lib=shim,
                          options=qnnrt.LoadOptions(pd_budget=pd_budget))
        prog.timed = timed
        name = prog.method(None).name
        prog.run(name, arrays)   # the PD workers exist from here

        def once() -> None:
            prog.run(name, arrays)
    for _ in range(5):
        once()
    pids = [str(os.getpid())] + ([str(c) for c in _children()] if workers else [])
    for pid in pids:
        subprocess.run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL, check=False)
    for _ in range(n):
        once()
    for pid in pids:
        subprocess.run(["callgrind_control", "-d", pid], stdout=subprocess.DEVNULL, check=False)
        subprocess.run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL, check=False)
    if residency.startswith("multi-pd"):
        trips = [w["round_trips"] for w in prog.pool.summary().get("pd_workers") or []
                 if not w["in_process"]]
        print(f"round trips per worker: {trips} over {n + 5} iterations", file=sys.stderr)


def _summary(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary line in the callgrind dump {dump.name}")


def count(args: argparse.Namespace, env: dict[str, str], n: int) -> tuple[int, int]:
    """Instructions of the instrumented part: (the main process's, all processes')."""
    python = env["ET_PY"] if args.runtime == "executorch" else sys.executable
    with tempfile.TemporaryDirectory() as d:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={d}/cg.%p"]
        cmd += (["--trace-children=yes", "--trace-children-skip=*callgrind_control*,*perl*"]
                if args.workers else [])
        cmd += [python, __file__, "--child", str(n), args.pte, "--runtime", args.runtime,
                "--residency", args.residency]
        cmd += ["--timed"] if args.timed else []
        cmd += ["--workers"] if args.workers else []
        cmd += ["--cli"] if args.cli else []
        cmd += ["--pd-budget", args.pd_budget] if args.pd_budget else []
        cmd += ["--llm"] if args.llm else ["--inputs", args.inputs, "--graph-calls", str(args.graph_calls)]
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            raise SystemExit(f"the counted run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        for line in done.stderr.splitlines():
            if line.startswith("round trips per worker"):
                print(line)
        main_pid = next(int(x.split("=")[1]) for x in done.stderr.split() if x.startswith("MAINPID="))
        dumps = {int(p.name.split(".")[1]): p for p in Path(d).glob("cg.*") if p.suffix == ".1"}
        if main_pid not in dumps or (not args.workers and len(dumps) != 1):
            raise SystemExit(f"unexpected callgrind dumps {sorted(p.name for p in dumps.values())}")
        counts = {pid: _summary(p) for pid, p in dumps.items()}
        return counts[main_pid], sum(counts.values())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("--inputs")
    ap.add_argument("--graph-calls", type=int, help="graph calls per iteration")
    ap.add_argument("--llm", action="store_true", help="qnnrt's LLM runner: per decode step")
    ap.add_argument("--runtime", choices=["qnnrt", "executorch"], default="qnnrt")
    ap.add_argument("--timed", action="store_true", help="qnnrt: Program.timed (time_breakdown)")
    ap.add_argument("--tree", type=Path, help="a checkout whose qnnrt to count (default: this one)")
    ap.add_argument("--iterations", help="two counts (default 100,300; --llm: 1,65 tokens)")
    ap.add_argument("--residency", default="eager", help="qnnrt: e.g. multi-pd:2 (this process's part)")
    ap.add_argument("--pd-budget", help="qnnrt: LoadOptions.pd_budget (e.g. 400MB for two PDs)")
    ap.add_argument("--workers", action="store_true",
                    help="multi-PD: count the PD workers' instructions too (valgrind --trace-children)")
    ap.add_argument("--cli", action="store_true", help="count `qnnrt run` (its loop and report)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_anchor_argument(ap)
    args = ap.parse_args()
    shim = os.environ.get("QNNRT_CALLGRIND_SHIM", "")
    if args.child is not None:
        print(f"MAINPID={os.getpid()}", file=sys.stderr)
        if args.cli:
            return child_cli(args.pte, args.inputs, args.child, shim)
        if args.llm:
            child_llm(args.pte, args.child, shim)
        else:
            child(args.runtime, args.pte, args.inputs, args.child, args.timed, shim, args.residency,
                  args.pd_budget, args.workers)
        return 0
    if args.llm and args.runtime != "qnnrt":
        ap.error("--llm counts qnnrt's LLM runner")
    if not args.llm and (args.inputs is None or args.graph_calls is None):
        ap.error("--inputs and --graph-calls are needed (or --llm)")
    anchor = anchor_dir(args.anchor)
    env = kit_env(anchor)
    env.update(QNN_SHIM_NOOP_EXEC="1", QNN_SHIM_COUNT="1")
    if args.runtime == "qnnrt":
        env.update(QNNRT_SHIM_ENV, QNNRT_CALLGRIND_SHIM=str(shim_lib(anchor)))
        tree = (args.tree or Path(__file__).resolve().parents[1]).resolve()
        if args.residency.startswith("multi-pd"):
            env["QNNRT_SPIN_US"] = "0"
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    few, many = (int(x) for x in (args.iterations or ("1,65" if args.llm else "100,300")).split(","))
    (a, a_all), (b, b_all) = count(args, env, few), count(args, env, many)
    who = (args.runtime + (" (timed)" if args.timed else "") + (" `qnnrt run`" if args.cli else "")
           + (f" at {args.tree}" if args.tree else ""))
    if args.workers:
        per_iteration = (b_all - a_all) / (many - few)
        print(f"{who}, {args.residency}, all processes: {a_all} instructions for {few} iterations, "
              f"{b_all} for {many}: {per_iteration:.0f} per iteration, main process "
              f"{(b - a) / (many - few):.0f}, its workers {(b_all - a_all - b + a) / (many - few):.0f}")
        return 0
    if args.llm:
        print(f"{who} LLM: {a} instructions generating {few} tokens, {b} for {many}: "
              f"{(b - a) / (many - few):.0f} per decode step")
    else:
        per_iteration = (b - a) / (many - few)
        print(f"{who}, {args.residency}: {a} instructions for {few} iterations, {b} for {many}: "
              f"{per_iteration:.0f} per iteration, {per_iteration / args.graph_calls:.0f} per graph call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
