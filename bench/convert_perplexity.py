"""Perplexity of converted bundles against the float model they came from (issue 44, accuracy): a fixed
text (default bench/data/perplexity.txt) tokenized with the first bundle's tokenizer and BOS rule,
scored by the numpy float reference on the source's weights (qnnrt/convert/reference.py) and by
each bundle through qnnrt's LLM runner (the prompt graph in AR-token windows advancing the KV cache,
as prefill does; the HTP simulator on x86). Prints one JSON object per line and a summary.

    PYTHONPATH=. nice -n 5 python bench/convert_perplexity.py MODEL BUNDLE [BUNDLE...] [--text FILE] [--json OUT]

MODEL: the Hugging Face folder or GGUF the bundles were converted from. Each bundle is loaded, scored
and closed in turn (one simulator PD at a time).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from qnnrt.convert.perplexity import Perplexity  # noqa: E402
TEXT = ROOT / "bench" / "data" / "perplexity.txt"


def bundle_row(bundle: Path, text: str, ids: list[int] | None) -> tuple[dict, Perplexity, list[int]]:
    """The bundle's perplexity on ``ids`` (None: the text's ids as `qnnrt llm --prompt` makes them,
    the bundle's tokenizer and its BOS first)."""
    import qnnrt
    from qnnrt.convert.perplexity import of_runner
    from qnnrt.llm import LlmRunner
    from qnnrt.llm.text import TextModel, TextTokenizer
    t0 = time.perf_counter()
    with qnnrt.load(str(bundle)) as prog:
        runner = LlmRunner(prog)
        if ids is None:
            ids = TextModel.of(TextTokenizer.from_path(bundle), runner.layout).prompt_ids(text)
        t1 = time.perf_counter()
        ppl = of_runner(runner, ids)
        t2 = time.perf_counter()
        lay = runner.layout
    rec = bundle / "qnnrt_convert.json"
    record = json.loads(rec.read_text()) if rec.is_file() else {}
    return {"what": str(bundle), "precision": record.get("options", {}).get("precision"),
            "context": lay.context_len, "prompt_ar": lay.prefill.ar_len, "nll": ppl.nll, "perplexity": ppl.perplexity,
            "load_s": round(t1 - t0, 1), "score_s": round(t2 - t1, 1)}, ppl, ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="the HF folder or GGUF the bundles came from")
    ap.add_argument("bundles", type=Path, nargs="+")
    ap.add_argument("--text", type=Path, default=TEXT)
    ap.add_argument("--json", type=Path, help="write the rows here too")
    ap.add_argument("--no-reference", action="store_true", help="bundles only")
    args = ap.parse_args()
    os.environ.setdefault("QNNRT_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "qnnrt_perplexity_cache"))
    from qnnrt.convert import open_model
    from qnnrt.convert.perplexity import of_reference
    text = args.text.read_text(encoding="utf-8").strip()
    rows, scored, ids = [], [], None
    for b in args.bundles:
        row, ppl, ids = bundle_row(b, text, ids)
        rows.append(row)
        scored.append(ppl)
        print(json.dumps(row), flush=True)
    assert ids is not None
    if not args.no_reference:
        t0 = time.perf_counter()
        src = open_model(args.model)
        ref = of_reference(src.spec, src.weights, ids)
        rows.insert(0, {"what": f"float reference ({args.model.name})", "precision": "float64", "nll": ref.nll,
                        "perplexity": ref.perplexity, "score_s": round(time.perf_counter() - t0, 1)})
        print(json.dumps(rows[0]), flush=True)
        for row, ppl in zip(rows[1:], scored):
            row["vs_float"] = round(ppl.relative_to(ref), 5)
    print(f"\n{len(ids)} tokens ({len(ids) - 1} scored) of {args.text}")
    for r in rows:
        rel = f"  {r['vs_float'] * 100:+.2f}% vs float" if "vs_float" in r else ""
        print(f"  {r['precision'] or '?':8s} perplexity {r['perplexity']:.4f}{rel}   {r['what']}")
    if args.json:
        args.json.write_text(json.dumps({"tokens": len(ids), "text": str(args.text), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
