"""What LoRA adapters as graph inputs cost (issue 48), on the x86 HTP simulator:

    python bench/lora_switch.py MODEL ADAPTERS_DIR [--rounds 3] [--max-new-tokens 24] [--work DIR]

MODEL: a Hugging Face folder (the tiny Llama of tools/fixtures/make_convert_models.py); ADAPTERS_DIR:
PEFT folders for it (tools/fixtures/make_lora_adapters.py). Converts MODEL twice (plain, and with
--lora-rank 4 on all seven projections; the part cache makes a repeat cheap), then prints one JSON:

- in one process: each adapter's load (PEFT read + checks + cast into the program's buffers), the
  first switch to an adapter on a KV cache (its methods prepared over its arrays) and later switches
  (picking the bound methods), medians of 200 switches;
- decode per token (host ms, median) of `qnnrt llm` on: the plain bundle, the LoRA bundle with no
  adapter (zeros), and with adapter `terse`, in alternating rounds of one process each; then one run
  of each under QNN's detailed profile for the simulated accelerator cycles per decoded token (and
  their floor)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
PROMPT = "0,148,218,86,135,130"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", *args], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL, check=False)
    if r.returncode != 0:
        sys.exit(f"qnnrt {args[0]} failed: {r.stderr[-2000:]}")
    return r


def convert(model: Path, work: Path) -> tuple[Path, Path]:
    plain, lora = work / "plain", work / "lora"
    common = ("--context", "128", "--prompt-ar", "16", "--parts", "2", "--force", "--quiet")
    _cli("convert", str(model), "-o", str(plain), *common)
    _cli("convert", str(model), "-o", str(lora), *common, "--lora-rank", "4", "--lora-targets", TARGETS)
    return plain, lora


def switch_costs(bundle: Path, adapters: dict[str, Path]) -> dict:
    sys.path.insert(0, str(ROOT))
    import qnnrt
    from qnnrt.llm.runner import LlmRunner
    from qnnrt.llm.session import CachedGenerator
    with qnnrt.load(bundle) as prog:
        runner = LlmRunner(prog)
        assert runner.adapters is not None
        out: dict = {"load_ms": {}, "first_switch_ms": {}}
        for name, folder in adapters.items():
            t = time.perf_counter()
            runner.adapters.load(name, folder)
            out["load_ms"][name] = round((time.perf_counter() - t) * 1e3, 3)
        gen = CachedGenerator(runner)
        for name in adapters:
            t = time.perf_counter()
            gen.use_adapter(name)
            runner.steps.prepare(gen.cache)        # what the next forward does first
            out["first_switch_ms"][name] = round((time.perf_counter() - t) * 1e3, 3)
        names = [None, *adapters]
        times = []
        for i in range(200):
            t = time.perf_counter()
            gen.use_adapter(names[i % len(names)])
            runner.steps.prepare(gen.cache)
            times.append(time.perf_counter() - t)
        out["later_switch_us_median"] = round(statistics.median(times) * 1e6, 2)
        out["adapter_bytes"] = sum(a.nbytes for a in runner.adapters.arrays(names[1]).values())
        return out


def decode_round(bundle: Path, adapters: dict[str, Path], pick: str | None, n: int, cycles: bool) -> dict:
    """One `qnnrt llm` run; ``cycles``: QNN's detailed profile (its cycles; its host time is not
    the plain run's, so the host figures come from rounds without it)."""
    with tempfile.TemporaryDirectory() as d:
        report = Path(d) / "r.json"
        lora = ("--lora", ",".join(f"{k}={v}" for k, v in adapters.items())) if pick is not None else ()
        adapter = ("--adapter", pick) if pick not in (None, "") else ()
        _cli("llm", str(bundle), *lora, *adapter, "--prompt-tokens", PROMPT, "--max-new-tokens", str(n),
             "--ignore-eos", "--profile-level", "detailed" if cycles else "off", "--report", str(report))
        r = json.loads(report.read_text())
    return {"decode_ms": r["decode_ms"]["median"], "cycles": r.get("accel_cycles_per_decoded_token"),
            "cycles_floor": r.get("accel_cycles_floor_per_decoded_token"), "tokens": r["generated_tokens"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("adapters", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    adapters = {p.name: p for p in sorted(args.adapters.iterdir()) if (p / "adapter_config.json").is_file()}
    work = args.work or Path(tempfile.mkdtemp(prefix="lora-bench-"))
    plain, lora = convert(args.model, work)
    result: dict = {"switch": switch_costs(lora, adapters)}
    configs = {"plain bundle": (plain, None), "LoRA bundle, no adapter": (lora, ""),
               "LoRA bundle, adapter terse": (lora, "terse")}
    rounds: dict[str, list[dict]] = {k: [] for k in configs}
    for _ in range(args.rounds):
        for label, (bundle, pick) in configs.items():
            rounds[label].append(decode_round(bundle, adapters, pick, args.max_new_tokens, False))
    profiled = {label: decode_round(bundle, adapters, pick, args.max_new_tokens, True)
                for label, (bundle, pick) in configs.items()}
    result["decode"] = {label: {"decode_ms_median": statistics.median(x["decode_ms"] for x in rs),
                                "decode_ms_rounds": [x["decode_ms"] for x in rs],
                                "accel_cycles_per_token": profiled[label]["cycles"],
                                "accel_cycles_floor_per_token": profiled[label]["cycles_floor"]}
                        for label, rs in rounds.items()}
    result["same_tokens_plain_vs_no_adapter"] = rounds["plain bundle"][0]["tokens"] == \
        rounds["LoRA bundle, no adapter"][0]["tokens"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
