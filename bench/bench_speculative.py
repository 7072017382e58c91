"""Speculative decoding vs plain on an LLM .pte: tokens per forward and the simulated HTP cycles per
decoded token (QNN's profile at the detailed level: on the x86 simulator its accelerator events are
simulated cycles, what a device would feel; wall time on the simulator is not), greedy, on a
repetitive set (the prompt repeated, an edit of a quoted block, a summary quoting its input) and on
plain prompts (random ids: nothing to quote but what the model itself repeats), and the plain prompts
sampled at temperature 1 (seeded: text that rarely repeats, where drafts seldom hold).

    python bench/bench_speculative.py [--pte FIX/model.pte] [--new-tokens 64] [--max-prompts K] [--json out.json]

Each prompt runs plain, then speculative auto, then speculative always (and lookahead on a
lookahead file), in one process; the greedy tokens of all must be identical (checked, printed).
`--max-prompts K` runs only the first K prompts of each set (a big model on the simulator)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from qnnrt import load
from qnnrt.llm import LlmRunner, Sampler, SamplingOptions
from qnnrt.llm.speculative import SpeculativeOptions
from qnnrt.loader import LoadOptions
from qnnrt.profiling.exec_profile import ExecutionProfiler

FIX = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "llama_stories_fp16"


def prompt_sets(vocab: int, capacity: int) -> dict[str, dict[str, list[int]]]:
    rng = np.random.default_rng(0)

    def ids(n: int) -> list[int]:
        return rng.integers(3, vocab, n).tolist()

    a, b, c = ids(16), ids(12), ids(24)
    edited = list(c)
    edited[5], edited[17] = (edited[5] + 1) % vocab, (edited[17] + 7) % vocab
    doc = ids(30)
    repetitive = {"repeated": a * 2, "repeated-x3": b * 3, "code-edit": c + edited[:12],
                  "summary-quote": doc + ids(2) + doc[:8]}
    plain = {f"plain-{i}": ids(32) for i in range(4)}
    sets = {"repetitive": repetitive, "plain": plain}
    for s in sets.values():
        for k, p in s.items():
            assert len(p) < capacity, (k, len(p))
    return sets


def run_one(runner: LlmRunner, profiler: ExecutionProfiler, prompt: list[int], n: int,
            seed: int | None) -> dict:
    runner.cycles = profiler
    sampler = Sampler(SamplingOptions(temperature=1.0, seed=seed)) if seed is not None else None
    res = runner.generate(prompt, n, eos_ids=[], sampler=sampler)
    r = res.report()
    s = r.get("speculative") or {}
    return {"tokens": res.tokens, "forwards": res.decode_forwards, "decoded": len(res.decode_s),
            "decode_calls": res.decode_executions or {},
            "tokens_per_forward": len(res.decode_s) / res.decode_forwards if res.decode_forwards else None,
            "cycles_per_token": r.get("accel_cycles_per_decoded_token"),
            "verifications": s.get("verifications", 0), "accepted": s.get("accepted", 0),
            "drafted": s.get("drafted", 0)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pte", default=str(FIX / "model.pte"))
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-prompts", type=int, default=None,
                    help="run only the first K prompts of each set (default: all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    profiler = ExecutionProfiler("detailed")
    if args.max_prompts is not None and args.max_prompts < 1:
        ap.error("--max-prompts must be >= 1")
    out: dict = {"pte": args.pte, "new_tokens": args.new_tokens, "max_prompts": args.max_prompts, "sets": {}}
    with load(args.pte, options=LoadOptions(profile_level="detailed", exec_profiler=profiler)) as prog:
        runners = {"plain": LlmRunner(prog),
                   "auto": LlmRunner(prog, speculative=SpeculativeOptions(policy="auto")),
                   "always": LlmRunner(prog, speculative=SpeculativeOptions(policy="always"))}
        lay = runners["plain"].layout
        if lay.mode == "lookahead":
            runners["lookahead"] = LlmRunner(prog, speculative=SpeculativeOptions(mode="lookahead"))
        sets = prompt_sets(lay.vocab_size, lay.prompt_capacity)
        sets["sampled"] = sets["plain"]
        for set_name, prompts in sets.items():
            rows = {}
            for i, (name, prompt) in enumerate(list(prompts.items())[:args.max_prompts]):
                n = min(args.new_tokens, lay.decode_limit - 1 - len(prompt))
                seed = i if set_name == "sampled" else None
                row = {mode: run_one(r, profiler, prompt, n, seed) for mode, r in runners.items()}
                # greedy: the same tokens; sampled: the same distribution, other draws
                same = all(x["tokens"] == row["plain"]["tokens"] for x in row.values()) if seed is None else None
                rows[name] = {"identical_tokens": same, **{m: {k: v for k, v in x.items() if k != "tokens"}
                                                           for m, x in row.items()}}
                print(json.dumps({"set": set_name, "prompt": name, **rows[name]}), flush=True)
            out["sets"][set_name] = {"prompts": rows}
        floors = profiler.floor_cycles()
    out["floor_cycles_per_call"] = floors
    for s in out["sets"].values():
        s["summary"] = summarize(s["prompts"], floors)
    print(json.dumps({"floor_cycles_per_call": floors} | {k: v["summary"] for k, v in out["sets"].items()},
                     indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def summarize(rows: dict, floors: dict[str, float]) -> dict:
    """Per mode: tokens per forward (all decoded tokens / all forwards), cycles per decoded token as
    profiled and at the floor (each decode-phase call at its graph's floor; summed over the set),
    and each mode's cycles relative to plain."""
    res = {}
    modes = list(next(iter(rows.values())))[1:]
    for mode in modes:
        dec = sum(r[mode]["decoded"] for r in rows.values())
        fw = sum(r[mode]["forwards"] for r in rows.values())
        cyc = sum((r[mode]["cycles_per_token"] or 0) * r[mode]["decoded"] for r in rows.values())
        floor = sum(floors.get(m, 0.0) * c for r in rows.values() for m, c in r[mode]["decode_calls"].items())
        res[mode] = {"tokens_per_forward": round(dec / fw, 3), "cycles_per_token": round(cyc / dec),
                     "floor_cycles_per_token": round(floor / dec)}
    for mode in modes[1:]:
        for k in ("cycles_per_token", "floor_cycles_per_token"):
            res[mode][k.replace("per_token", "vs_plain")] = round(res[mode][k] / res["plain"][k], 3)
    res["identical_tokens"] = all(r["identical_tokens"] for r in rows.values()) if any(
        r["identical_tokens"] is not None for r in rows.values()) else None
    return res


if __name__ == "__main__":
    raise SystemExit(main())
