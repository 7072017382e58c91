"""Replay recorded greedy sequences through qnnrt's draft switch at a given cost ratio: tokens per
forward and cost per token against plain decoding, without running a model.

    python bench/replay_draft_switch.py record --out seqs.json [--pte tests/data/llm/llama_stories_fp16/model.pte]
    python bench/replay_draft_switch.py replay seqs.json [--ratio 4.6] [--policy auto,always]

`record`: plain decoding (the real simulator) of every prompt of bench/bench_speculative.py's sets,
as many new tokens as that benchmark takes (--new-tokens, the context's end first): the repetitive and
plain sets greedy, the sampled set (the plain prompts at temperature 1, seed = the prompt's index)
sampled; writes each prompt and its tokens. A sampled text replays as if greedy: a draft holds as far
as it agrees with the text (speculative sampling accepts by probability, so this only tells how
often drafts match text that rarely repeats).

`replay`: each recorded sequence through qnnrt's own generate loop (qnnrt.llm.loops.generate) with its
prompt-lookup strategy (qnnrt.llm.speculative: the drafter, the draft switch, the cost meter), on
stand-in graph calls: every logits row is one-hot on the recorded next token (so greedy decoding
reproduces the recording, and a draft holds exactly as far as it agrees with it), and the loop's
clock advances 1 per plain decode call and `ratio` per verification (and per prefill window: the
hybrid file's verifier is its prefill method, whose cost the meter starts from). A verification's
cost on the simulator is ~4.3-4.6 plain calls on the fp16 fixture (bench_speculative's floors);
on a device, where a decode step is bound by reading the weights, the ratio is nearer 1.

The layout (methods, windows, context) is the .pte's (--pte, the file that was recorded). Run with
PYTHONPATH at another tree to replay through that tree's switch (its loops.generate and Speculation
must take the same arguments; they do back to the first speculative commit).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "data" / "llm" / "llama_stories_fp16" / "model.pte"


def layout_of(pte: str) -> Any:
    import qnnrt
    from qnnrt.llm import LlmRunner
    prog = qnnrt.load(pte)
    try:
        return LlmRunner(prog).layout
    finally:
        prog.close()


def cmd_record(a: argparse.Namespace) -> int:
    sys.path.insert(0, str(HERE))
    from bench_speculative import prompt_sets

    import qnnrt
    from qnnrt.llm import LlmRunner, Sampler, SamplingOptions
    out: dict[str, Any] = {"pte": a.pte, "new_tokens": a.new_tokens, "sets": {}}
    with qnnrt.load(a.pte) as prog:
        runner = LlmRunner(prog)
        lay = runner.layout
        sets = prompt_sets(lay.vocab_size, lay.prompt_capacity)
        sets["sampled"] = sets["plain"]
        for set_name, prompts in sets.items():
            rows = {}
            for i, (name, prompt) in enumerate(prompts.items()):
                n = min(a.new_tokens, lay.decode_limit - 1 - len(prompt))
                # as bench_speculative's sampled set: temperature 1, seed i
                sampler = Sampler(SamplingOptions(temperature=1.0, seed=i)) if set_name == "sampled" else None
                res = runner.generate(prompt, n, eos_ids=[], sampler=sampler)
                rows[name] = {"prompt": list(prompt), "tokens": list(res.tokens)}
                print(json.dumps({"set": set_name, "prompt": name, "tokens": len(res.tokens)}), flush=True)
            out["sets"][set_name] = rows
    Path(a.out).write_text(json.dumps(out) + "\n")
    print(f"wrote {a.out}")
    return 0


class FakeCache:
    """What the loops read of a cache: n_past."""

    def __init__(self) -> None:
        self.n_past = 0


class ReplaySteps:
    """Graph calls that answer with the recorded sequence: the row of the token at position p is
    one-hot on the token recorded at p + 1. Each call advances the virtual clock by its cost."""

    def __init__(self, layout: Any, sequence: Sequence[int], ratio: float) -> None:
        self.layout, self.seq, self.ratio = layout, list(sequence), ratio
        self.now = 0.0
        self.verifications = 0
        self.plain_calls = 0

    def clock(self) -> float:
        return self.now

    def forward(self, method: Any, cache: FakeCache, tokens: Sequence[int], pad_token: int,
                tree: Any = None) -> np.ndarray:
        T = method.ar_len
        raw = np.zeros((1, T, self.layout.vocab_size), np.float32)
        p0 = cache.n_past
        if self.seq[p0] != tokens[0]:
            raise AssertionError(f"position {p0}: fed {tokens[0]}, recorded {self.seq[p0]}")
        for i in range(len(tokens)):
            nxt = p0 + i + 1
            raw[0, i, self.seq[nxt] if nxt < len(self.seq) else 0] = 1.0
        if T == 1:
            self.now += 1.0
            self.plain_calls += 1
        else:
            self.now += self.ratio
            self.verifications += 1
        return raw

    def commit(self, method: Any, cache: FakeCache, n: int, slots: Sequence[int] | None = None) -> None:
        cache.n_past += n


def replay_one(layout: Any, prompt: list[int], tokens: list[int], ratio: float, policy: str) -> dict[str, Any]:
    from qnnrt.llm.loops import generate
    from qnnrt.llm.speculative import Speculation, SpeculativeOptions
    steps = ReplaySteps(layout, [*prompt, *tokens], ratio)
    strategy = Speculation(layout, SpeculativeOptions(policy=policy))
    windows = -(-len(prompt) // layout.prefill.ar_len)
    res = generate(steps, layout, prompt, len(tokens), eos_ids=[], cache=FakeCache(), clock=steps.clock,
                   strategy=strategy)
    if list(res.tokens) != tokens:
        raise AssertionError("the replay did not reproduce the recorded tokens")
    decoded = len(res.tokens) - 1
    decode_cost = steps.now - windows * ratio       # the prefill windows are not decode work
    return {"decoded": decoded, "forwards": res.decode_forwards, "verifications": steps.verifications - windows,
            "tokens_per_forward": decoded / res.decode_forwards, "cost_per_token": decode_cost / decoded}


def cmd_replay(a: argparse.Namespace) -> int:
    rec = json.loads(Path(a.recorded).read_text())
    layout = layout_of(a.pte or rec["pte"])
    ratios = [float(x) for x in a.ratio.split(",")]
    policies = a.policy.split(",")
    summary: dict[str, Any] = {}
    for ratio in ratios:
        for set_name, prompts in rec["sets"].items():
            for policy in policies:
                rows = {name: replay_one(layout, p["prompt"], p["tokens"], ratio, policy)
                        for name, p in prompts.items()}
                dec = sum(r["decoded"] for r in rows.values())
                fw = sum(r["forwards"] for r in rows.values())
                cost = sum(r["cost_per_token"] * r["decoded"] for r in rows.values())
                key = f"ratio {ratio:g} / {set_name} / {policy}"
                summary[key] = {"tokens_per_forward": round(dec / fw, 3), "cost_vs_plain": round(cost / dec, 3),
                                "per_prompt_tokens_per_forward": {n: round(r["tokens_per_forward"], 2)
                                                                  for n, r in rows.items()}}
                print(json.dumps({key: summary[key]}), flush=True)
    import qnnrt
    print(json.dumps({"recorded": a.recorded, "qnnrt": str(Path(qnnrt.__file__).parent)}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="plain greedy sequences of bench_speculative's prompts (the simulator)")
    r.add_argument("--pte", default=str(FIXTURE))
    r.add_argument("--new-tokens", type=int, default=64)
    r.add_argument("--out", required=True)
    p = sub.add_parser("replay", help="the recorded sequences through the draft switch")
    p.add_argument("recorded")
    p.add_argument("--pte", help="the file whose layout to use (default: the recorded one)")
    p.add_argument("--ratio", default="4.6", help="a verification's cost in plain decode calls (comma list)")
    p.add_argument("--policy", default="auto,always", help="draft policies (comma list: auto, always, never)")
    a = ap.parse_args()
    return {"record": cmd_record, "replay": cmd_replay}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
