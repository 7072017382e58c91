"""qnnrt against ExecuTorch's own runtime on the same hybrid LLM .pte: the same prefill and decode
steps, tokens and logits compared; and the time to first token of each (an A/B in one sitting).

    bash bench/anchor/setup.sh ANCHOR            # ExecuTorch 1.5.1's runtime (bench/anchor/README.md)
    . ANCHOR/env.sh                              # for the ExecuTorch side ($ET_PY, the shim)
    $ET_PY bench/llm_vs_executorch.py et MODEL.pte --prompt-ids IDS --steps 8 --out et_run.npz
    python bench/llm_vs_executorch.py qnnrt MODEL.pte et_run.npz        # in a shell without env.sh
    python bench/llm_vs_executorch.py ttft MODEL.pte --prompt-ids IDS --et-python ANCHOR/venv/bin/python \\
        --et-env ANCHOR/env.sh [--rounds 3] [--repeats 2]

`et` (ExecuTorch's python; needs no qnnrt): `executorch.runtime` runs `prefill_forward` on the prompt,
then `--steps` `kv_forward` calls, building every input as ExecuTorch's Qualcomm llama runner
(examples/qualcomm/oss_scripts/llama/runner: prompt_processor, token_generator, kv_manager in smart-mask
mode) does: the prompt in windows of T, the last one right-padded; positions start_pos + i for all
T slots; the mask's causal rows (cache columns [0, n_past) and the window's own columns up to the row)
opened with 0.0 and everything else -65535.0, the columns of each call's kept tokens opened after it;
each call's new K/V entries written into the caches at n_past (the caches held as [.., C - min(T)]
and fed to each method at its own length C - T); greedy (argmax of the last valid row). Writes the
tokens, each chosen token's logits row, per-call seconds and the inputs of the last call to an .npz.
`--rounds R` repeats the prefill call R times on fresh caches (its timing; the first round's outputs
are the ones compared).

`qnnrt` (qnnrt's python, the real simulator): `LlmRunner(prog)` (the prepared step, the default)
generates steps + 1 tokens greedily from the same prompt with `keep_logits=True`; prints whether the
tokens are equal, the max |diff| of every logits row, the smallest top-2 margin, and both sides' times.

`ttft`: per repeat, one ExecuTorch process (R prefill calls) then one qnnrt process (R one-token
generations, each on a fresh cache: TTFT = the prefill call(s) and the first sampling), alternating.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MASK_OPEN, MASK_CLOSED = 0.0, -65535.0     # ExecuTorch's runner, float mask
# the SmolLM2 tokenizer's ids of "Once upon a time, there was a little girl named Lily. She liked to play
# outside in the park." (tests/data/llm/hf_tokenizer_smollm2, no special tokens)
DEFAULT_PROMPT_TEXT = ("Once upon a time, there was a little girl named Lily. She liked to play outside in "
                       "the park.")


TOKENIZER = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "hf_tokenizer_smollm2" / "tokenizer.json"


def parse_ids(text: str | None) -> list[int]:
    """Token ids, comma or space separated; None: DEFAULT_PROMPT_TEXT through the SmolLM2 tokenizer."""
    if text is None:
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(TOKENIZER)).encode(DEFAULT_PROMPT_TEXT, add_special_tokens=False).ids
    return [int(t) for t in text.replace(",", " ").split()]


# -- the ExecuTorch side ---------------------------------------------------------------------------------
class EtHybrid:
    """A hybrid .pte through executorch.runtime, inputs as ExecuTorch's Qualcomm llama runner builds them."""

    def __init__(self, pte: str) -> None:
        from executorch.runtime import Runtime
        t0 = time.perf_counter()
        self.program = Runtime.get().load_program(pte)
        self.methods = {name: self.program.load_method(name) for name in ("prefill_forward", "kv_forward")}
        self.load_s = time.perf_counter() - t0
        self.context_len = int(self._const("get_max_context_len"))
        self.vocab = int(self._const("get_vocab_size"))
        self.layers = int(self._const("get_n_layers"))
        self.shapes = {n: self._input_shapes(m) for n, m in self.methods.items()}
        self.ar_len = {n: s[0][1] for n, s in self.shapes.items()}
        k = self.shapes["kv_forward"][3]                 # [1, H, D, C - T]
        self.heads, self.head_dim = k[1], k[2]
        self.max_cache_len = self.context_len - min(self.ar_len.values())
        self.reset()

    def _const(self, name: str) -> Any:
        out = self.program.load_method(name).execute([])
        return out[0].item() if hasattr(out[0], "item") else out[0]

    @staticmethod
    def _input_shapes(method: Any) -> list[tuple[int, ...]]:
        meta = method.metadata
        return [tuple(meta.input_tensor_meta(i).sizes()) for i in range(meta.num_inputs())]

    def reset(self) -> None:
        L, H, D, M = self.layers, self.heads, self.head_dim, self.max_cache_len
        self.k = [np.zeros((1, H, D, M), np.float32) for _ in range(L)]
        self.v = [np.zeros((1, H, M, D), np.float32) for _ in range(L)]
        self.n_past = 0

    def _mask(self, T: int, n_past: int) -> np.ndarray:
        """init_attention_mask (smart mask, causal attention map): row i sees the cache's [0, n_past)
        and the window's columns 0..i (the window's columns are the last T)."""
        C = self.context_len
        m = np.full((1, 1, T, C), MASK_CLOSED, np.float32)
        m[0, 0, :, :n_past] = MASK_OPEN
        for i in range(T):
            m[0, 0, i, C - T:C - T + i + 1] = MASK_OPEN
        return m

    def call(self, name: str, tokens: np.ndarray, mask: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, float]:
        import torch
        T = self.ar_len[name]
        cl = self.context_len - T
        xs = [torch.from_numpy(tokens), torch.from_numpy(mask), torch.from_numpy(pos)]
        xs += [torch.from_numpy(np.ascontiguousarray(k[..., :cl])) for k in self.k]
        xs += [torch.from_numpy(np.ascontiguousarray(v[:, :, :cl, :])) for v in self.v]
        t0 = time.perf_counter()
        out = self.methods[name].execute(xs)
        dt = time.perf_counter() - t0
        self.last_inputs = {f"in{i}": x.numpy().copy() for i, x in enumerate(xs)}
        logits = out[0].numpy().astype(np.float32).copy()
        self._new = ([o.numpy().copy() for o in out[1:1 + self.layers]],
                     [o.numpy().copy() for o in out[1 + self.layers:1 + 2 * self.layers]])
        return logits, dt

    def keep(self, n_past: int, n: int) -> None:
        """update_cache: the first n new entries written at slot n_past."""
        ko, vo = self._new
        for l in range(self.layers):
            self.k[l][..., n_past:n_past + n] = ko[l][..., :n]
            self.v[l][:, :, n_past:n_past + n, :] = vo[l][:, :, :n, :]

    def prefill(self, prompt: list[int]) -> tuple[int, np.ndarray, list[float]]:
        name = "prefill_forward"
        T = self.ar_len[name]
        if self.n_past + len(prompt) > self.context_len - T:
            raise SystemExit(f"prompt of {len(prompt)} tokens exceeds the prompt processor's {self.context_len - T}")
        mask = self._mask(T, self.n_past)
        toks = np.zeros((1, T), np.int32)             # the runner's buffer: later windows overwrite it
        times, logits = [], None
        pos = self.n_past
        for j in range(0, len(prompt), T):
            chunk = prompt[j:j + T]
            toks[0, :len(chunk)] = chunk
            logits, dt = self.call(name, toks, mask, np.arange(pos, pos + T, dtype=np.int32)[None])
            times.append(dt)
            self.keep(pos, len(chunk))
            mask[0, 0, :, pos:pos + len(chunk)] = MASK_OPEN     # update_attention_mask
            pos += len(chunk)
            last = len(chunk) - 1
        self.n_past = pos
        assert logits is not None
        row = logits[0, last]
        return int(np.argmax(row)), row, times

    def decode(self, token: int, steps: int) -> tuple[list[int], list[np.ndarray], list[float]]:
        name = "kv_forward"
        T = self.ar_len[name]
        mask = self._mask(T, self.n_past)
        toks, rows, times = [], [], []
        for _ in range(steps):
            logits, dt = self.call(name, np.array([[token]], np.int32), mask,
                                   np.array([[self.n_past]], np.int32))
            times.append(dt)
            row = logits[0, 0]
            token = int(np.argmax(row))
            self.keep(self.n_past, 1)
            mask[0, 0, :, self.n_past] = MASK_OPEN
            self.n_past += 1
            toks.append(token)
            rows.append(row)
        return toks, rows, times


def cmd_et(a: argparse.Namespace) -> int:
    prompt = parse_ids(a.prompt_ids)
    et = EtHybrid(a.pte)
    prefill_s: list[float] = []
    for r in range(a.rounds):
        et.reset()
        t0 = time.perf_counter()
        tok, row, calls = et.prefill(prompt)
        prefill_s.append(time.perf_counter() - t0)
        if r == 0:
            first, first_row, prefill_calls = tok, row, calls
    toks, rows, decode_s = et.decode(first, a.steps) if a.steps else ([], [], [])
    tokens = [first, *toks]
    np.savez(a.out, tokens=np.array(tokens, np.int64), logits=np.stack([first_row, *rows]),
             prompt=np.array(prompt, np.int64), prefill_s=np.array(prefill_s), decode_s=np.array(decode_s),
             prefill_call_s=np.array(prefill_calls), load_s=np.array(et.load_s),
             **({f"last_{k}": v for k, v in et.last_inputs.items()} if a.save_inputs else {}))
    print(json.dumps({"runtime": "executorch", "load_s": round(et.load_s, 2), "tokens": tokens,
                      "prefill_s": [round(x, 3) for x in prefill_s],
                      "decode_s": [round(x, 3) for x in decode_s], "out": a.out}))
    return 0


# -- the qnnrt side --------------------------------------------------------------------------------------
def qnnrt_generate(pte: str, prompt: list[int], n: int, backend_lib: str | None, rounds: int = 1) -> dict:
    import qnnrt
    from qnnrt.llm import LlmRunner
    t0 = time.perf_counter()
    prog = qnnrt.load(pte, backend_lib=backend_lib)
    try:
        runner = LlmRunner(prog, create_contexts=True)
        load_s = time.perf_counter() - t0
        results = [runner.generate(prompt, n, eos_ids=[], keep_logits=True) for _ in range(rounds)]
    finally:
        prog.close()
    res = results[0]
    return {"load_s": load_s, "tokens": list(res.tokens), "logits": [np.asarray(x) for x in res.logits],
            "ttft_s": [r.ttft_s for r in results], "decode_s": list(res.decode_s)}


def top2_margin(row: np.ndarray) -> float:
    a = np.sort(row.astype(np.float64))
    return float(a[-1] - a[-2])


def cmd_qnnrt(a: argparse.Namespace) -> int:
    ref = np.load(a.et_npz)
    prompt = ref["prompt"].tolist()
    et_tokens = ref["tokens"].tolist()
    q = qnnrt_generate(a.pte, prompt, len(et_tokens), a.backend_lib)
    diffs = [float(np.max(np.abs(np.asarray(x, np.float32) - y))) for x, y in zip(q["logits"], ref["logits"])]
    out = {"prompt_tokens": len(prompt), "tokens_equal": q["tokens"] == et_tokens,
           "qnnrt_tokens": q["tokens"], "executorch_tokens": et_tokens,
           "max_abs_logits_diff": max(diffs), "per_row_max_abs_diff": diffs,
           "bit_identical_rows": sum(d == 0.0 for d in diffs), "rows": len(diffs),
           "logits_absmax": float(np.max(np.abs(ref["logits"]))),
           "smallest_top2_margin": min(top2_margin(r) for r in ref["logits"]),
           "qnnrt": {"load_s": round(q["load_s"], 2), "ttft_s": round(q["ttft_s"][0], 3),
                     "decode_s_median": round(statistics.median(q["decode_s"]), 3) if q["decode_s"] else None},
           "executorch": {"load_s": round(float(ref["load_s"]), 2),
                          "prefill_s": [round(float(x), 3) for x in ref["prefill_s"]],
                          "decode_s": [round(float(x), 3) for x in ref["decode_s"]]}}
    print("\n".join(f"{k}: {json.dumps(v)}" for k, v in out.items()))
    return 0 if out["tokens_equal"] else 1


def cmd_qnnrt_ttft(a: argparse.Namespace) -> int:
    q = qnnrt_generate(a.pte, parse_ids(a.prompt_ids), 1, a.backend_lib, a.rounds)
    print(json.dumps({"runtime": "qnnrt", "load_s": round(q["load_s"], 2), "ttft_s": q["ttft_s"],
                      "tokens": q["tokens"]}))
    return 0


def _last_json(text: str) -> dict:
    return json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])


def cmd_ttft(a: argparse.Namespace) -> int:
    """ExecuTorch's prefill call against qnnrt's TTFT: processes alternating, each R rounds."""
    me = str(Path(__file__).resolve())
    ids = ",".join(map(str, parse_ids(a.prompt_ids)))
    et_cmd = f"{shlex.quote(a.et_python)} {shlex.quote(me)} et {shlex.quote(a.pte)} --prompt-ids {ids} " \
             f"--steps 0 --rounds {a.rounds}"
    if a.et_env:
        et_cmd = f". {shlex.quote(a.et_env)} && {et_cmd}"
    # qnnrt's side without the kit's environment: the real libraries, not the shim
    q_env = {k: v for k, v in os.environ.items() if not k.startswith("QNN_SHIM") and k != "QNN_SDK_ROOT"}
    if a.et_env:
        q_env.pop("LD_LIBRARY_PATH", None)
    et_s: list[float] = []
    q_s: list[float] = []
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for rep in range(a.repeats):
            et = subprocess.run(["bash", "-c", f"{et_cmd} --out {shlex.quote(d)}/et{rep}.npz"], check=True,
                                capture_output=True, text=True)
            e = _last_json(et.stdout)
            q = subprocess.run([sys.executable, me, "qnnrt-ttft", a.pte, "--prompt-ids", ids,
                                "--rounds", str(a.rounds)], check=True, capture_output=True, text=True, env=q_env)
            r = _last_json(q.stdout)
            et_s += e["prefill_s"]
            q_s += r["ttft_s"]
            rows.append({"repeat": rep, "executorch_prefill_s": e["prefill_s"],
                         "qnnrt_ttft_s": [round(x, 3) for x in r["ttft_s"]],
                         "same_first_token": e["tokens"][0] == r["tokens"][0]})
            print(json.dumps(rows[-1]), flush=True)
    med_e, med_q = statistics.median(et_s), statistics.median(q_s)
    print(json.dumps({"executorch_prefill_s_median": round(med_e, 3), "qnnrt_ttft_s_median": round(med_q, 3),
                      "qnnrt_minus_executorch_ms": round((med_q - med_e) * 1e3, 1),
                      "ratio": round(med_q / med_e, 3),
                      "load_average": [round(x, 1) for x in os.getloadavg()]}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("et", help="ExecuTorch's side (run with ExecuTorch's python)")
    e.add_argument("pte")
    e.add_argument("--prompt-ids", help="token ids, comma or space separated (default: DEFAULT_PROMPT_TEXT's "
                                         "ids through tests/data/llm/hf_tokenizer_smollm2)")
    e.add_argument("--steps", type=int, default=8, help="kv_forward calls after the prefill")
    e.add_argument("--rounds", type=int, default=1, help="prefill calls (fresh caches each); the first is kept")
    e.add_argument("--out", required=True, help=".npz")
    e.add_argument("--save-inputs", action="store_true", help="also the last call's inputs (last_in0 ...)")
    q = sub.add_parser("qnnrt", help="qnnrt's side, compared with an `et` run's .npz")
    q.add_argument("pte")
    q.add_argument("et_npz")
    q.add_argument("--backend-lib")
    t = sub.add_parser("ttft", help="the A/B: ExecuTorch's prefill call vs qnnrt's TTFT, alternating processes")
    t.add_argument("pte")
    t.add_argument("--prompt-ids")
    t.add_argument("--et-python", required=True, help="ExecuTorch's python (ANCHOR/venv/bin/python)")
    t.add_argument("--et-env", help="a script to source for the ExecuTorch side (ANCHOR/env.sh)")
    t.add_argument("--rounds", type=int, default=3, help="calls per process")
    t.add_argument("--repeats", type=int, default=2, help="ExecuTorch / qnnrt process pairs")
    qt = sub.add_parser("qnnrt-ttft", help="(ttft's qnnrt process) R one-token generations")
    qt.add_argument("pte")
    qt.add_argument("--prompt-ids")
    qt.add_argument("--rounds", type=int, default=3)
    qt.add_argument("--backend-lib")
    a = ap.parse_args()
    return {"et": cmd_et, "qnnrt": cmd_qnnrt, "ttft": cmd_ttft, "qnnrt-ttft": cmd_qnnrt_ttft}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
