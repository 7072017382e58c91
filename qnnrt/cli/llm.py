"""`qnnrt llm MODEL.pte`: generate with (or score a sequence through) an ExecuTorch Qualcomm LLM
program, what ExecuTorch's ``qnn_llama_runner`` does."""
from __future__ import annotations

import io
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from qnnrt.cli.run_common import (add_profiles, add_runtime_options, check_targets, latency_stats,
                           open_program, traced, print_performance, print_recoveries, write_report)
from qnnrt.errors import QnnrtError
from qnnrt.fileio import check_output_path, read_text, write_atomic
from qnnrt.llm.text import INSTALL_HINT
from qnnrt.units import format_bytes


def add_parser(sub) -> None:
    p = sub.add_parser("llm", help="generate with an ExecuTorch Qualcomm LLM .pte (prefill + "
                                   "KV-cache decode), or score a token sequence")
    p.add_argument("path", help="the .pte (hybrid prefill_forward + kv_forward, or kv_forward)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt-tokens", help="prompt token ids (comma/space separated) or a file of them")
    src.add_argument("--prompt", help="prompt text (needs --tokenizer)")
    src.add_argument("--score-tokens", help="score mode: token ids (or a file of them); prints each "
                                            "token's log-likelihood and the perplexity")
    src.add_argument("--chat", action="store_true",
                     help="an interactive multi-turn chat in the terminal through the tokenizer's chat "
                          "template (needs --tokenizer; an empty line or end of input ends it)")
    p.add_argument("--tokenizer", help="a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json, "
                                       "chat_template.jinja) or a tokenizer.json (" + INSTALL_HINT + "); "
                                       "default for a Genie bundle: its own")
    p.add_argument("--system", help="--chat: the system message")
    p.add_argument("--max-new-tokens", type=int, default=32, help="default 32")
    p.add_argument("--seq-len", type=int, default=0,
                   help="stop when the sequence reaches this length (default: the context length)")
    p.add_argument("--temperature", type=float, default=None,
                   help="0 = greedy (default; a Genie bundle: its config's sampler.temp)")
    p.add_argument("--top-k", type=int, default=None,
                   help="sample from the k best (0 = all, the default; a Genie bundle: its sampler's)")
    p.add_argument("--top-p", type=float, default=None,
                   help="nucleus sampling (1 = off, the default; a Genie bundle: its sampler's)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (a Genie bundle: its sampler's)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at the EOS token")
    p.add_argument("--add-bos", action="store_true",
                   help="prepend the model's BOS to --prompt-tokens, as Genie does to every query (even one "
                        "that begins with BOS); without it the ids run as given")
    p.add_argument("--score-prefill", type=int, default=None,
                   help="score mode: tokens given to the prefill method (default: as many as fit); "
                        "the rest go through the decode method one at a time")
    p.add_argument("--dump-logits", help="score mode: write each method call's float logits "
                                         "(<method>_s<k>.npy) and all rows (logits.npy) to this folder")
    add_lora_options(p)
    p.add_argument("--adapter", default=None, metavar="NAME",
                   help="generate with this --lora adapter (default: none, the base model); --chat: a line "
                        "'/adapter NAME' (or '/adapter') switches")
    add_speculative_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run)


def add_lora_options(p) -> None:
    p.add_argument("--lora", action="append", default=[], metavar="NAME=DIR[,NAME=DIR]",
                   help="LoRA adapters (PEFT folders: adapter_config.json + adapter_model.safetensors) for a "
                        "bundle converted with --lora-rank; repeatable")


def lora_specs(args) -> dict[str, Path]:
    """The --lora adapters by name, checked before anything loads."""
    from qnnrt.llm.lora import parse_lora_specs
    specs = parse_lora_specs(args.lora)
    for name, folder in specs.items():
        if not folder.is_dir():
            raise QnnrtError(f"--lora {name}={folder}: no such folder; give a PEFT adapter folder")
    adapter = getattr(args, "adapter", None)
    if adapter is not None and adapter not in specs:
        raise QnnrtError(f"--adapter {adapter}: not among the --lora adapters ({', '.join(specs) or 'none given'})")
    return specs


def add_speculative_options(p) -> None:
    """The speculative-decoding flags of `qnnrt llm` and `qnnrt serve`."""
    g = p.add_argument_group("speculative decoding")
    g.add_argument("--speculative", choices=("auto", "off", "prompt-lookup", "lookahead"), default="auto",
                   help="prompt-lookup: draft the next tokens from the prompt and the text so far (n-gram "
                        "lookup), verify each draft in one call of the file's multi-token method, keep what the "
                        "sampler itself would choose (greedy output unchanged; sampling keeps its distribution); "
                        "lookahead: ExecuTorch's lookahead decoding, for files exported with --model_mode "
                        "lookahead; auto (default): lookahead for such a file, else off")
    g.add_argument("--draft-max", type=int, default=None,
                   help="prompt-lookup: most tokens per draft (default: the verifier's window less one)")
    g.add_argument("--draft-policy", choices=("auto", "always", "never"), default=None,
                   help="prompt-lookup: auto (default): draft while the tokens a verification yields pay for "
                        "its measured cost over plain decode calls; always: whenever a draft exists; never: plain")
    g.add_argument("--draft-ngram", type=int, default=None,
                   help="prompt-lookup: longest n-gram matched (default 3; shorter ones are tried down to 1)")
    g.add_argument("--ngram", type=int, default=None,
                   help="lookahead: n-gram size N (default 3; the file does not record it)")
    g.add_argument("--window", type=int, default=None,
                   help="lookahead: window W (default: with gcap, half the decode method's slots per level)")
    g.add_argument("--gcap", type=int, default=None,
                   help="lookahead: n-grams verified per step G (default: as the window's default; 0: none)")


DRAFT_FLAGS = {"draft_max": "--draft-max", "draft_policy": "--draft-policy", "draft_ngram": "--draft-ngram"}
LOOKAHEAD_FLAGS = {"ngram": "--ngram", "window": "--window", "gcap": "--gcap"}


def speculative_options(args, layout):
    """SpeculativeOptions from the flags for this file (None: plain decoding). A flag of another
    mode than the one this run decodes with is an error, not ignored; the values are checked by
    the options themselves."""
    from qnnrt.llm.drafting import LookupOptions
    from qnnrt.llm.lookahead import LookaheadOptions
    from qnnrt.llm.speculative import SpeculativeOptions
    mode = args.speculative
    if mode == "auto":
        mode = "lookahead" if layout.mode == "lookahead" else "off"
    applies = DRAFT_FLAGS if mode == "prompt-lookup" else LOOKAHEAD_FLAGS if mode == "lookahead" else {}
    for key, flag in {**DRAFT_FLAGS, **LOOKAHEAD_FLAGS}.items():
        if getattr(args, key) is not None and key not in applies:
            which = "prompt-lookup" if key in DRAFT_FLAGS else "lookahead"
            raise QnnrtError(f"{flag} applies to --speculative {which}; this run decodes "
                             f"{'plainly' if mode == 'off' else 'with ' + mode} ({layout.mode} file)")
    if mode == "off":
        return None
    lookup = LookupOptions() if args.draft_ngram is None else LookupOptions(ngram_max=args.draft_ngram)
    return SpeculativeOptions(mode, args.draft_max or 0, args.draft_policy or "auto", lookup,
                              lookahead=LookaheadOptions(args.ngram, args.window, args.gcap))


def file_sampling(program):
    """What the file says to sample with: a Genie bundle's sampler, else greedy."""
    from qnnrt.llm import SamplingOptions
    if program.genie is not None:
        from qnnrt.llm.genie_layout import genie_sampling
        return genie_sampling(program.genie)
    return SamplingOptions()


def sampling_options(args, defaults):
    """The flags given, else `defaults` (the file's)."""
    import dataclasses
    given = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "seed")
             if getattr(args, k) is not None}
    return dataclasses.replace(defaults, **given)


def cycles_reader(profiler):
    """What the runner reads the profiled accelerator cycles through (QNN reports them at the
    detailed level only)."""
    return profiler if profiler is not None and profiler.level == "detailed" else None


def add_floor_cycles(report: dict, profiler) -> None:
    """The decode phase's cycles per token with each graph call at its graph's floor (its ops'
    fewest cycles over the run): the simulated cost without a loaded host's stalls."""
    ran = report.get("decode_executions")
    if not ran or cycles_reader(profiler) is None or not report.get("n_generated", 0) > 1:
        return
    floors = profiler.floor_cycles()
    if all(g in floors for g in ran):
        total = sum(n * floors[g] for g, n in ran.items())
        report["accel_cycles_floor_per_decoded_token"] = total / (report["n_generated"] - 1)


def tokenizer_source(model: str, given: str | None) -> str | None:
    """--tokenizer, else a Genie bundle's own tokenizer (the file its config names, with the chat
    template beside it), else None."""
    if given is not None:
        return given
    from qnnrt.formats.genie import is_genie_bundle, read_genie_config
    return str(read_genie_config(model).tokenizer) if is_genie_bundle(model) else None


def parse_token_ids(text: str, what: str = "--prompt-tokens") -> list[int]:
    """Ids separated by commas / whitespace (brackets allowed), or the name of a file holding them."""
    p = Path(text)
    if not re.fullmatch(r"[\s\d,\[\]]+", text) and p.is_file():
        text = read_text(p, "token id file")
    elif not re.fullmatch(r"[\s\d,\[\]]+", text):
        raise QnnrtError(f"{what}: {text!r} is neither token ids (e.g. 1,15,493) nor a file of them")
    items = [t for t in re.split(r"[\s,\[\]]+", text) if t]
    if not all(t.isdigit() for t in items):
        raise QnnrtError(f"{what}: token ids must be non-negative integers")
    if not items:
        raise QnnrtError(f"{what}: no token ids")
    return [int(t) for t in items]


def _check_vocab(ids: list[int], vocab: int, what: str) -> None:
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise QnnrtError(f"{what}: token id(s) {bad[:5]} outside the model's vocabulary of {vocab}")


def run(args) -> int:
    return traced(_run, args)


def _check_args(args) -> None:
    """The arguments that go together, checked before anything loads (the tokenizer defaults to a
    Genie bundle's own)."""
    if args.max_new_tokens < 1:
        raise QnnrtError("--max-new-tokens must be >= 1")
    args.tokenizer = tokenizer_source(args.path, args.tokenizer)
    if (args.prompt is not None or args.chat) and not args.tokenizer:
        raise QnnrtError(f"{'--chat' if args.chat else '--prompt TEXT'} needs --tokenizer DIR (a Hugging Face "
                         f"tokenizer folder or tokenizer.json), or give --prompt-tokens ids")
    if args.prompt is None and args.prompt_tokens is None and args.score_tokens is None and not args.chat:
        raise QnnrtError("give --prompt-tokens IDS, --prompt TEXT --tokenizer DIR, --chat --tokenizer DIR, "
                         "or --score-tokens IDS")
    if args.dump_logits and args.score_tokens is None:
        raise QnnrtError("--dump-logits applies to score mode (--score-tokens)")
    check_targets(args)


def _run(args, tracer) -> int:
    from qnnrt.llm import LlmRunner, Sampler, SamplingOptions, layout_of
    from qnnrt.llm.text import TextModel, TextTokenizer
    _check_args(args)
    specs = lora_specs(args)
    if args.dump_logits:
        try:
            Path(args.dump_logits).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise QnnrtError(f"--dump-logits {args.dump_logits}: cannot create the folder ({e})") from e
        check_output_path(Path(args.dump_logits) / "logits.npy", "--dump-logits")
    tokenizer = TextTokenizer.from_path(args.tokenizer) if args.tokenizer else None
    sampling_options(args, SamplingOptions())  # checks them before loading
    t_start = time.perf_counter()
    prog, profiler = open_program(args, default_mode="burst", tracer=tracer)   # qnn_llama_runner's vote
    report: dict[str, Any] = {"path": str(args.path)}
    try:
        layout = layout_of(prog)
        sampler = Sampler(sampling_options(args, file_sampling(prog)))
        runner = LlmRunner(prog, layout, speculative=speculative_options(args, layout),
                           cycles=cycles_reader(profiler))
        from qnnrt.llm.lora import load_adapters
        load_adapters(runner.adapters, specs, str(args.path))
        if args.adapter is not None:
            assert runner.adapters is not None
            runner.adapters.use(args.adapter)
        report["adapter"] = args.adapter
        lay = runner.layout
        report["layout"] = lay.describe()
        report["load_s"] = round(time.perf_counter() - t_start, 6)
        text = TextModel.of(tokenizer, lay) if tokenizer is not None else None
        if args.chat:
            assert text is not None
            report["turns"] = chat(runner, text, sampler, args)
        elif args.score_tokens is not None:
            ids = parse_token_ids(args.score_tokens, "--score-tokens")
            _check_vocab(ids, lay.vocab_size, "--score-tokens")
            t0 = time.perf_counter()
            sc = runner.score(ids, n_prefill=args.score_prefill)
            report["score"] = {"tokens": ids, "n_prefill": sc.prefill_tokens, "logprobs": sc.logprobs,
                               "nll": sc.nll, "perplexity": sc.perplexity,
                               "seconds": round(time.perf_counter() - t0, 6)}
            if args.dump_logits:
                report["score"]["dumped"] = _dump_logits(Path(args.dump_logits), lay, sc)
        else:
            if args.prompt is not None:
                assert text is not None
                ids = text.prompt_ids(args.prompt)
            else:
                ids = parse_token_ids(args.prompt_tokens)
                if args.add_bos:
                    if lay.bos_id is None:
                        raise QnnrtError("--add-bos: this model has no BOS token (its config gives none)")
                    ids = [lay.bos_id] + ids
            _check_vocab(ids, lay.vocab_size, "prompt")
            eos = [] if args.ignore_eos else (list(text.stop_ids) if text is not None else None)
            sampler = Sampler(sampling_options(args, file_sampling(prog)), history=ids)
            stops = StopText(text, ids, prog.genie.stop_sequences) \
                if args.prompt is not None and text is not None and prog.genie is not None else None
            res = runner.generate(ids, args.max_new_tokens, sampler=sampler, eos_ids=eos,
                                  seq_len=args.seq_len or None, on_token=stops.feed if stops else None)
            report.update(res.report())
            add_floor_cycles(report, profiler)
            report["prompt_token_ids"] = ids
            report["decode_ms"] = ({k: v for k, v in latency_stats([x * 1e3 for x in res.decode_s]).items()
                                    if k != "all"} | {"n": len(res.decode_s)}
                                   if res.decode_s else {"min": None, "median": None, "p90": None, "n": 0})
            if stops is not None and stops.stopped:
                report["text"], report["stop_reason"] = stops.text, "stop_sequence"
            elif text is not None:
                report["text"] = text.tokenizer.decode(res.tokens)
        report["method_calls"] = dict(runner.calls)
        report["residency"] = prog.pool.summary()
        report["recoveries"] = prog.recovery.summary()
    finally:
        prog.close()
    add_profiles(report, prog, profiler, args)
    _print_summary(report, profiler, args)
    write_report(args, report)
    return 0


class StopText:
    """A Genie config's stop sequences over the text a generation makes (Genie's text query: the
    text before the first stop sequence is the answer; token ids in, as GenieDialog_tokenQuery,
    apply none)."""

    def __init__(self, text, prompt: list[int], stops) -> None:
        from qnnrt.llm.detokenize import IncrementalDetokenizer, StopMatcher
        self.detok = IncrementalDetokenizer(text.tokenizer.decode, context=prompt)
        self.matcher = StopMatcher(list(stops))
        self.parts: list[str] = []

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, token: int) -> bool:
        if self.matcher.stops:
            self.parts.append(self.matcher.feed(self.detok.add(token)))
        return self.matcher.stopped


def chat(runner, text, sampler, args) -> list[dict]:
    """Read a user message per line, stream the reply; each turn reuses the KV cache of the last."""
    from qnnrt.llm.chat_template import render_chat
    from qnnrt.llm.session import CachedGenerator
    from qnnrt.llm.textgen import generate_text
    gen = CachedGenerator(runner)
    genie = runner.program.genie
    stops = list(genie.stop_sequences) if genie is not None else []      # a Genie config's stop-sequence
    messages = [{"role": "system", "content": args.system}] if args.system else []
    turns = []
    tty = sys.stdin.isatty()
    while True:
        if tty:
            print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            break
        if line.startswith("/adapter"):
            name = line[len("/adapter"):].strip() or None
            try:
                gen.use_adapter(name)
            except QnnrtError as e:
                print(f"qnnrt llm: {e}", file=sys.stderr)
                continue
            messages = messages[:1] if args.system else []
            print(f"  [adapter: {name or 'none'}; a new conversation]", file=sys.stderr, flush=True)
            continue
        messages.append({"role": "user", "content": line.rstrip("\n")})
        ids = text.prompt_ids(render_chat(text.tokenizer.chat_template, messages,
                                          special_tokens=text.tokenizer.special_tokens))
        _check_vocab(ids, runner.layout.vocab_size, "chat")
        if len(ids) > runner.layout.prompt_capacity:
            print(f"qnnrt llm: the conversation is {len(ids)} tokens, more than the {runner.layout.prompt_capacity} "
                  f"that fit this model's context: ending the chat", file=sys.stderr)
            break
        g = generate_text(gen, text, ids, args.max_new_tokens, sampler=sampler, stops=stops,
                          on_text=lambda chunk, _tok: print(chunk, end="", flush=True))
        print(flush=True)
        messages.append({"role": "assistant", "content": g.text})
        turn = g.result.report() | {"prompt_tokens": len(ids), "cached_tokens": g.reused,
                                    "finish_reason": g.finish_reason, "text": g.text}
        turns.append(turn)
        spec = g.result.speculative
        per_forward = f", {spec['tokens_per_forward']:.2f} per forward" if spec and spec["tokens_per_forward"] else ""
        print(f"  [{len(g.result.tokens)} tokens{per_forward}, {g.reused} of {len(ids)} prompt tokens reused, time to "
              f"first token {g.result.ttft_s * 1e3:.1f} ms]", file=sys.stderr, flush=True)
    return turns


def _dump_logits(folder: Path, lay, sc) -> list[str]:
    """Per method call: prefill chunks as [rows, V], decode steps as [V]; plus logits.npy."""
    rows = np.stack([np.asarray(r, dtype=np.float32) for r in sc.logits])
    files = {"logits.npy": rows}
    T, n = lay.prefill.ar_len, sc.prefill_tokens
    i = 0
    for k, j in enumerate(range(0, n, T)):
        m = min(T, n - j)
        files[f"{lay.prefill.name}_s{k}.npy"] = rows[i:i + m]
        i += m
    for k in range(len(rows) - i):
        files[f"{lay.decode.name}_s{k}.npy"] = rows[i + k]
    folder.mkdir(parents=True, exist_ok=True)
    for name, a in files.items():
        buf = io.BytesIO()
        np.save(buf, a)
        write_atomic(folder / name, buf.getvalue(), "--dump-logits")
    return sorted(files)


def speculative_line(s: dict) -> str:
    """One line of what speculative decoding did in a generation."""
    tpf = s["tokens_per_forward"]
    rate = s["acceptance_rate"]
    how = (f"ngram {s['ngram']}, window {s['window']}, gcap {s['gcap']}" if s["mode"] == "lookahead"
           else s["policy"])
    return (f"  speculative {s['mode']} ({how}): {s['tokens']} token(s) in {s['forwards']} forward(s)"
            f" ({'-' if tpf is None else f'{tpf:.2f}'} per forward), {s['verifications']} verification(s), "
            f"{s['accepted']}/{s['drafted']} drafted token(s) accepted"
            f"{'' if rate is None else f' ({rate:.0%})'}")


def _print_summary(r: dict, profiler, args) -> None:
    lay = r["layout"]
    print(f"{r['path']}: {lay['mode']} LLM, {lay['n_layers']} layers, context {lay['context_len']}, "
          f"prefill window {lay['prefill_ar_len']}, vocab {lay['vocab_size']}, caches {lay['cache_dtype']}, "
          f"logits {lay['logits_dtype']}")
    if r.get("adapter"):
        print(f"  LoRA adapter: {r['adapter']}")
    if "turns" in r:
        print(f"  chat: {len(r['turns'])} turn(s), {sum(t['cached_tokens'] for t in r['turns'])} prompt tokens "
              f"reused from the KV cache")
    elif "score" in r:
        s = r["score"]
        toks, lps = s["tokens"], s["logprobs"]
        print(f"  scored {len(lps)} token(s) ({s['n_prefill']} through prefill) in {s['seconds']:.3f} s")
        print("  position  token  log-likelihood")
        for i, (t, lp) in enumerate(zip(toks[1:], lps), 1):
            print(f"  {i:8d}  {t:5d}  {lp:14.6f}")
        print(f"  mean log-likelihood {-s['nll']:.6f}, perplexity {s['perplexity']:.4f}")
        if "dumped" in s:
            print(f"  logits written to {args.dump_logits}/ ({len(s['dumped'])} files)")
    else:
        d = r["decode_ms"]
        print(f"  prompt {r['prompt_tokens']} token(s) -> {r['n_generated']} generated "
              f"(stop: {r['stop_reason']})")
        print(f"  generated: {' '.join(map(str, r['generated_tokens']))}")
        if "text" in r:
            print(f"  text: {r['text']}")
        pf = r["prefill_tokens_per_s"]
        dt = r["decode_tokens_per_s"]
        print(f"  time to first token {r['ttft_s'] * 1e3:.1f} ms ({r['prefill_calls']} prefill call(s), "
              f"{pf:.1f} tokens/s); decode {dt:.2f} tokens/s" if dt else
              f"  time to first token {r['ttft_s'] * 1e3:.1f} ms ({r['prefill_calls']} prefill call(s), "
              f"{pf:.1f} tokens/s); no decode steps")
        if d.get("n"):
            print(f"  decode per token: min {d['min']:.3f} ms, median {d['median']:.3f} ms, "
                  f"p90 {d['p90']:.3f} ms over {d['n']} token(s) in {r['decode_forwards']} forward(s)")
        if r.get("speculative"):
            print(speculative_line(r["speculative"]))
        if r.get("accel_cycles_per_decoded_token") is not None:
            floor = r.get("accel_cycles_floor_per_decoded_token")
            print(f"  accelerator cycles per decoded token {r['accel_cycles_per_decoded_token']:,.0f} "
                  f"(QNN's profile, decode phase)" + ("" if floor is None else
                                                      f", {floor:,.0f} at each graph's floor"))
    res = r["residency"]
    print(f"  load {r['load_s'] * 1e3:.1f} ms; residency {res['policy']}: peak live {res['peak_live']}/"
          f"{res['contexts_total']}, creates {res['creates']}, evictions {res['evictions']}")
    if res.get("pd_estimate_total_bytes"):
        print(f"  PD (QNN's estimates): {format_bytes(res['pd_estimate_total_bytes'])}")
    print_performance(r)
    print_recoveries(r["recoveries"])
    if "heap" in r and args.heap_profiling_path:
        print(f"  heap profile: {args.heap_profiling_path} (+ .json)")
    if profiler is not None:
        print(profiler.summary_table())
    if math.isnan(r.get("score", {}).get("perplexity", 0.0)):
        print("  (perplexity undefined: no scored tokens)")
