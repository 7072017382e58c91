"""`qnnrt serve MODEL.pte --tokenizer DIR`: the LLM behind an OpenAI-compatible HTTP API
(/v1/chat/completions, /v1/completions, /v1/models; /health, /metrics). One model instance, requests
in a bounded FIFO; binds 127.0.0.1 unless told otherwise."""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from qnnrt.cli.llm import (add_lora_options, add_speculative_options, cycles_reader, lora_specs, speculative_options,
                           tokenizer_source)
from qnnrt.cli.process import Stopped, stop_signals
from qnnrt.cli.run_common import (add_profiles, add_runtime_options, check_targets, open_program,
                           traced, write_report)
from qnnrt.errors import QnnrtError
from qnnrt.install import extra_hint
from qnnrt.serve.options import ConnectionOptions
from qnnrt.units import parse_size

_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")
SERVE_HINT = extra_hint("serve", "starlette uvicorn tokenizers jinja2 llguidance msgspec")
API_KEY_ENV = "QNNRT_API_KEY"


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve an ExecuTorch Qualcomm LLM .pte or a Genie bundle through an "
                                     f"OpenAI-compatible HTTP API ({SERVE_HINT})")
    p.add_argument("path", help="the .pte (hybrid prefill_forward + kv_forward, or kv_forward) or a Genie bundle "
                                "folder")
    p.add_argument("--tokenizer", default=None,
                   help="a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json, "
                        "chat_template.jinja) or a tokenizer.json (default for a Genie bundle: its own)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="default 8000 (0: any free port, printed)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' (401 otherwise); also ${API_KEY_ENV}")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages of ORIGIN (e.g. http://localhost:3000) call the API from a browser: CORS "
                        "headers and preflight answers (repeatable; '*' any origin, warned about with --api-key); "
                        "default: none")
    p.add_argument("--model-name", default=None, help="the model id clients use (default: the file's stem)")
    p.add_argument("--max-queue", type=int, default=16,
                   help="requests waiting behind the running one; more are answered 429 (default 16)")
    p.add_argument("--max-body-bytes", default="4MiB", help="largest request body (default 4MiB)")
    p.add_argument("--max-connections", type=int, default=ConnectionOptions.max_connections, metavar="N",
                   help="connections open at once; past it the one waiting longest for a request header is "
                        f"closed (default {ConnectionOptions.max_connections})")
    p.add_argument("--header-timeout", type=float, default=ConnectionOptions.header_timeout_s, metavar="S",
                   help="seconds a connection has to send a whole request header (after it opens, or after the "
                        f"previous response); a body may pause {ConnectionOptions.body_timeout_s:g} s at most "
                        f"(default {ConnectionOptions.header_timeout_s:g})")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="the most tokens one choice of a request generates (a larger max_tokens is cut to it, "
                        "finish_reason length; default: up to the end of the context)")
    p.add_argument("--no-kv-reuse", action="store_true",
                   help="prefill every prompt in full (by default a prompt that extends the previous "
                        "request's tokens, the next turn of a chat, prefills only the new ones)")
    p.add_argument("--embeddings", default=None, metavar="MODEL",
                   help="also serve /v1/embeddings with this program (input_ids [1, S] and attention_mask in, a "
                        "sentence embedding [1, D] out: a qnnrt build folder, an EPContext .onnx or a .pte)")
    p.add_argument("--embeddings-tokenizer", default=None, metavar="DIR",
                   help="the embedding model's tokenizer folder (required with --embeddings)")
    p.add_argument("--embeddings-name", default=None,
                   help="the embedding model's id (default: the --embeddings file's stem)")
    p.add_argument("--embeddings-inputs", default=None, metavar="ROLES",
                   help="what the embedding program's inputs are, in order, e.g. input_ids,attention_mask "
                        "(default: by name, or by position for inputs without those names, as a .pte's)")
    add_lora_options(p)
    add_speculative_options(p)
    add_runtime_options(p)
    p.set_defaults(func=run)


def require_stack() -> None:
    try:
        import msgspec  # noqa: F401  -- the request schema
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise QnnrtError(f"qnnrt serve needs an ASGI stack and msgspec ({e.name} is missing): {SERVE_HINT}") \
            from None


def check_args(args) -> tuple[str | None, int]:
    """The flags checked before anything loads; the API key (flag or environment) and body limit."""
    if not 0 <= args.port <= 65535:
        raise QnnrtError(f"--port {args.port}: expected 0..65535")
    if args.max_queue < 0:
        raise QnnrtError("--max-queue must be >= 0")
    if args.max_connections < 1:
        raise QnnrtError(f"--max-connections {args.max_connections}: at least 1")
    if not 0 < args.header_timeout <= 3600:
        raise QnnrtError(f"--header-timeout {args.header_timeout}: expected seconds in (0, 3600]")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise QnnrtError(f"--max-tokens {args.max_tokens}: at least 1")
    try:
        max_body = parse_size(args.max_body_bytes)
    except ValueError as e:
        raise QnnrtError(f"--max-body-bytes: {e}") from None
    if max_body < 1024:
        raise QnnrtError("--max-body-bytes: at least 1KiB")
    if (args.embeddings is None) != (args.embeddings_tokenizer is None):
        raise QnnrtError("--embeddings and --embeddings-tokenizer go together: the program and its tokenizer folder")
    for flag in ("embeddings_name", "embeddings_inputs"):
        if getattr(args, flag) is not None and args.embeddings is None:
            raise QnnrtError(f"--{flag.replace('_', '-')} needs --embeddings")
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if key is not None and not key.isprintable():
        raise QnnrtError("--api-key: printable characters only")
    for origin in args.cors_origin:
        if origin != "*" and not _ORIGIN.match(origin):
            raise QnnrtError(f"--cors-origin {origin[:100]!r}: expected an origin as browsers send it, "
                             f"scheme://host[:port] without a path (e.g. http://localhost:3000), or '*'")
    if "*" in args.cors_origin and key is not None:
        print("qnnrt serve: warning: --cors-origin '*' with --api-key: any web page a key holder visits can "
              "use the key it is given; name the origins instead", file=sys.stderr)
    return key, max_body


def run(args) -> int:
    return traced(_run, args)


def _run(args, tracer) -> int:
    require_stack()
    key, max_body = check_args(args)
    from qnnrt.llm import LlmRunner, layout_of
    from qnnrt.llm.embedding import EmbeddingModel, Pooling
    from qnnrt.llm.grammar import GrammarCompiler
    from qnnrt.llm.session import CachedGenerator
    from qnnrt.llm.text import TextModel, TextTokenizer
    from qnnrt.serve.app import Service, ServeSettings, create_app
    from qnnrt.serve.engine import Engine
    from qnnrt.serve.server import listen, run_server
    source = tokenizer_source(args.path, args.tokenizer)
    if source is None:
        raise QnnrtError(f"{args.path}: give --tokenizer DIR (a Hugging Face tokenizer folder or tokenizer.json); "
                         "only a Genie bundle carries its own")
    tokenizer = TextTokenizer.from_path(source)
    emb_tokenizer = TextTokenizer.from_path(args.embeddings_tokenizer) if args.embeddings_tokenizer else None
    check_targets(args)
    specs = lora_specs(args)
    sock = listen(args.host, args.port)          # a taken port fails before the model loads
    if key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"qnnrt serve: warning: listening on {args.host} without --api-key: anyone who can reach "
              f"this address can use the model", file=sys.stderr)
    t_start = time.perf_counter()
    prog, profiler = open_program(args, tracer=tracer)
    report: dict[str, Any] = {"path": str(args.path)}
    signum: int | None = None
    engine: Engine | None = None
    runner: LlmRunner | None = None
    emb_prog = None
    try:
        layout = layout_of(prog)
        runner = LlmRunner(prog, layout, speculative=speculative_options(args, layout),
                           cycles=cycles_reader(profiler))
        from qnnrt.llm.lora import load_adapters
        load_adapters(runner.adapters, specs, str(args.path))
        report["adapters"] = {n: str(f) for n, f in specs.items()}
        text = TextModel.of(tokenizer, runner.layout)
        embedder = None
        if emb_tokenizer is not None:
            # loaded after the LLM, in the same process: the PD planner counts the LLM's live contexts
            # (the heap and execution profiles stay the LLM's)
            emb_args = vars(args) | {"path": args.embeddings, "heap_profiling_path": None, "profile_level": "off"}
            emb_prog, _ = open_program(argparse.Namespace(**emb_args), tracer=tracer)
            roles = args.embeddings_inputs.split(",") if args.embeddings_inputs else None
            embedder = EmbeddingModel(emb_prog, emb_tokenizer, Pooling.of_folder(args.embeddings_tokenizer), roles)
            report["embeddings"] = {"path": str(args.embeddings), **embedder.describe()}
        report["layout"] = runner.layout.describe()
        report["load_s"] = round(time.perf_counter() - t_start, 6)
        engine = Engine(CachedGenerator(runner), text, max_queue=args.max_queue, reuse_kv=not args.no_kv_reuse,
                        pd_in_use=lambda: _pd_in_use(prog, emb_prog), embedder=embedder, tracer=tracer)
        engine.start()
        model_id = args.model_name or Path(args.path).stem
        grammars = GrammarCompiler(tokenizer, runner.layout.vocab_size, text.stop_ids) if text.stop_ids else None
        emb_id = (args.embeddings_name or Path(args.embeddings).stem) if embedder is not None else None
        if emb_id == model_id:
            raise QnnrtError(f"the LLM and the embedding model are both named {model_id!r}: give --embeddings-name")
        clash = [n for n in specs if n in (model_id, emb_id)]
        if clash:
            raise QnnrtError(f"--lora {clash[0]}: the name is the model's own id; clients choose an adapter by "
                             f"its name as the request's model: give it another name")
        settings = ServeSettings(model_id, key, max_body, emb_id, args.max_tokens, sampling=serve_sampling(prog),
                                 stops=prog.genie.stop_sequences if prog.genie is not None else (),
                                 cors_origins=tuple(args.cors_origin), adapters=tuple(specs))
        service = Service(engine, text, runner.layout, settings, int(time.time()), grammars)
        level = {"verbose": "debug"}.get(args.log_level, args.log_level if args.log_level != "warn" else "warning")
        signum = run_server(create_app(service), engine, sock, log_level=level, stop_signals=stop_signals(),
                            connections=ConnectionOptions(header_timeout_s=args.header_timeout,
                                                          max_connections=args.max_connections))
    finally:
        if engine is not None:
            engine.stop()
            report["requests"] = list(engine.records)
            report["totals"] = dict(engine.totals)
        sock.close()
        report["method_calls"] = dict(runner.calls) if runner is not None else {}
        report["residency"] = prog.pool.summary()
        if emb_prog is not None:
            report["embeddings_residency"] = emb_prog.pool.summary()
            emb_prog.close()
        prog.close()
    add_profiles(report, prog, profiler, args)
    _print_summary(report)
    write_report(args, report)
    if signum is not None:
        raise Stopped(signum)     # exit 128 + signum, as every command stopped by a signal
    return 0


def serve_sampling(program):
    """What a request that gives no temperature / top_k / top_p / seed samples with: a Genie
    bundle's sampler, else OpenAI's defaults."""
    if program.genie is None:
        from qnnrt.serve.requests import OPENAI_SAMPLING
        return OPENAI_SAMPLING
    from qnnrt.llm.genie_layout import genie_sampling
    return genie_sampling(program.genie)


def _pd_in_use(*progs) -> int | None:
    """PD bytes of the programs' live contexts (QNN's reservations, else qnnrt's prediction)."""
    sizes = []
    for prog in progs:
        if prog is None:
            continue
        s = prog.pool.summary()
        est, pred = s.get("pd_estimate_bytes") or {}, s.get("pd_predicted_bytes") or {}
        sizes += [est.get(k) or pred.get(k) for k in prog.pool.live_keys]
    known = [x for x in sizes if isinstance(x, int)]
    return sum(known) if len(known) == len(sizes) else None


def _print_summary(r: dict) -> None:
    t = r.get("totals") or {}
    print(f"qnnrt serve: {int(t.get('completed', 0))} request(s) completed, {int(t.get('cancelled', 0))} cancelled, "
          f"{int(t.get('failed', 0))} failed, {int(t.get('rejected_queue_full', 0))} refused (queue full), "
          f"{int(t.get('rejected_shutting_down', 0))} refused (queued at shutdown); "
          f"{int(t.get('completion_tokens', 0))} tokens generated, {int(t.get('cached_tokens', 0))} prompt "
          f"tokens reused from the KV cache", flush=True)
