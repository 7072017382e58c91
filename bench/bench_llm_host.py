"""qnnrt's own host work per LLM token, with the ExecuTorch kit's shim's no-op graphExecute (so the graphs cost
nothing and what remains is qnnrt's): decode per token (median, sampling included and excluded),
the floor it is compared with (copying that token's new K/V entries into the caches and reading its
logits, in numpy, same run), and time to first token with its floor (`ttft_floor_ms`: the
prefill's cache-mirror syncs and K/V puts for the prompt on a fresh cache, and one logits row).

    bash bench/anchor/setup.sh ANCHOR; . ANCHOR/env.sh       # the kit: bench/anchor/README.md
    python bench/bench_llm_host.py MODEL.pte [--mode prepared|generic|before] [--steps 127] [--anchor ANCHOR]

--anchor defaults to $QNNRT_ANCHOR (set by env.sh); --shim LIB gives the shim library itself instead.

`--mode before`: the runner as it was before the prepared step (run with PYTHONPATH at that tree);
`generic`: this tree's ``Program.run`` path (prepared=False, contexts created at the first call).
Each round loads the program afresh (TTFT includes what the first call pays).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path

# appended, not prepended: with --mode before, PYTHONPATH's tree is the qnnrt under test
sys.path.append(str(Path(__file__).resolve().parents[1]))
from bench.anchor.kit import QNNRT_SHIM_ENV, add_anchor_argument, anchor_dir, kit_env, shim_lib


def _noop_env(anchor: Path | None) -> None:
    """The shim's variables for qnnrt with a no-op graphExecute; QNN_SHIM_REAL from the kit when the
    environment does not have it (env.sh not sourced)."""
    os.environ.update(QNN_SHIM_COUNT="1", QNN_SHIM_NOOP_EXEC="1", **QNNRT_SHIM_ENV)
    if "QNN_SHIM_REAL" not in os.environ:
        os.environ["QNN_SHIM_REAL"] = kit_env(anchor_dir(anchor))["QNN_SHIM_REAL"]


def _floor_ms(runner, steps: int) -> float:
    """Median ms to copy one decode step's new K/V entries into the caches and read its logits
    (the prepared step's own buffers, a cache of the runner's), over `steps` positions."""
    import numpy as np
    lay = runner.layout
    cache = runner.new_cache()
    b = runner.steps.buffers[lay.decode.name]
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        cache.put(lay.decode, b.k_out, b.v_out, 1, b.k_out_all, b.v_out_all)
        np.array(b.logits[0, 0], dtype=np.float32, copy=True)
        out.append(time.perf_counter() - t0)
        if cache.n_past >= lay.context_len - 2:
            cache.truncate(0)
    return statistics.median(out) * 1e3


def _ttft_floor_ms(runner, prompt_len: int, repeats: int) -> float:
    """Median ms of the copies a prompt's prefill cannot avoid, on a fresh cache each time: per
    window, the prefill's cache mirror brought up to date (its first window's entries, for the
    next) and that window's new K/V entries put in the caches; the last row of logits read."""
    import numpy as np
    lay = runner.layout
    pre = lay.prefill
    b = runner.steps.buffers[pre.name]
    out = []
    for _ in range(repeats):
        cache = runner.new_cache()
        t0 = time.perf_counter()
        for start in range(0, prompt_len, pre.ar_len):
            n = min(pre.ar_len, prompt_len - start)
            cache.sync(pre)
            cache.put(pre, b.k_out, b.v_out, n, b.k_out_all, b.v_out_all)
        np.array(b.logits[0, (prompt_len - 1) % pre.ar_len], dtype=np.float32, copy=True)
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


def _sample_ms(vocab: int, steps: int) -> float:
    import numpy as np

    from qnnrt.llm import Sampler
    s, row = Sampler(), np.zeros(vocab, np.float32)
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        s(row)
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


def one_round(path: str, mode: str, prompt: list[int], steps: int, shim: str,
              speculative: str = "off") -> dict:
    import qnnrt
    from qnnrt.llm import LlmRunner
    t0 = time.perf_counter()
    prog = qnnrt.load(path, backend_lib=shim)
    try:
        if mode == "before":
            runner = LlmRunner(prog)
        elif speculative != "off":
            from qnnrt.llm.speculative import SpeculativeOptions
            runner = LlmRunner(prog, speculative=SpeculativeOptions(policy=speculative))
        else:
            runner = LlmRunner(prog, prepared=mode == "prepared", create_contexts=mode == "prepared")
        load_s = time.perf_counter() - t0
        lay = runner.layout
        n = min(steps + 1, lay.context_len - len(prompt) - 1)
        res = runner.generate(prompt, n, eos_ids=[])
        row = {"mode": mode, "load_ms": load_s * 1e3, "ttft_ms": res.ttft_s * 1e3,
               "prefill_calls": res.prefill_calls,
               "decode_ms_median": statistics.median(res.decode_s) * 1e3, "decode_steps": len(res.decode_s),
               "sample_ms": _sample_ms(lay.vocab_size, 200),
               "decode_forwards": getattr(res, "decode_forwards", len(res.decode_s))}   # (a tree before #30)
        row["decode_host_ms"] = row["decode_ms_median"] - row["sample_ms"]
        if mode == "prepared":
            row["floor_ms"] = _floor_ms(runner, 200)
            row["ttft_floor_ms"] = _ttft_floor_ms(runner, len(prompt), 20)
        return row
    finally:
        prog.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("--mode", choices=["prepared", "generic", "before"], default="prepared")
    ap.add_argument("--steps", type=int, default=127)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=37)
    add_anchor_argument(ap)
    ap.add_argument("--shim", help="the kit's libQnnHtp.so (default: the one in --anchor)")
    ap.add_argument("--speculative", choices=["off", "auto", "always", "never"], default="off",
                    help="prompt lookup with this draft policy (the prepared step); under the no-op backend "
                         "the logits stay as the buffer was, so drafts of a repeated token hold: the host "
                         "work of verifications, per token")
    args = ap.parse_args()
    shim = args.shim or str(shim_lib(anchor_dir(args.anchor)))
    _noop_env(args.anchor)
    from qnnrt.llm import LlmRunner
    if args.mode == "before" and "prepared" in inspect.signature(LlmRunner).parameters:
        sys.exit("--mode before: run with PYTHONPATH at a tree before the prepared step")
    prompt = [(7 * i + 3) % 500 + 1 for i in range(args.prompt_len)]
    rows = [one_round(args.pte, args.mode, prompt, args.steps, shim, args.speculative)
            for _ in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if isinstance(rows[0][k], float)}
    print(json.dumps({"pte": args.pte, "mode": args.mode, "speculative": args.speculative, "rounds": rows,
                      "median": med,
                      "prompt_tokens": len(prompt), "python": sys.version.split()[0],
                      "qnnrt": str(Path(__import__("qnnrt").__file__).parent)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
