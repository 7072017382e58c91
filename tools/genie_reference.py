"""Run a Genie bundle with Qualcomm's own Genie library (libGenie.so from the onnxruntime-qnn wheel):
the reference runtime qnnrt's tokens are compared with.

    python tools/genie_reference.py BUNDLE (--prompt-tokens 0,5,9 | --prompt TEXT) [--max-new-tokens N]
                                    [--log-level error|warn|info|verbose] [--json]

GenieDialogConfig_createFromJson on BUNDLE/genie_config.json (run from BUNDLE, as Genie resolves its
paths from the working folder), GenieDialog_create, then GenieDialog_tokenQuery (token ids in, token
ids out through its callback) or GenieDialog_query (text); sampling is the config's sampler (greedy
where it says top-k 1). Prints the tokens, their text, dialog creation time and the time between
successive tokens (decode per token; the first token after the prompt is the prefill's). --json prints
one JSON object instead. Genie's log goes to stderr. Exit 1 with Genie's status when a call fails.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

LEVELS = {"error": 1, "warn": 2, "info": 3, "verbose": 4}   # GenieLog_Level_t (GenieLog.h)
SENTENCE_COMPLETE = 0                                        # GenieDialog_SentenceCode_t
# the QNN libraries libGenie.so dlopens by name: loaded first from the same wheel, so those are found
QNN_LIBS = ("libQnnSystem.so", "libQnnHtp.so", "libQnnHtpNetRunExtensions.so")

LOG_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p)
TOKEN_CB = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p)
TEXT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p)


class GenieError(RuntimeError):
    pass


@dataclass
class Result:
    """What one query produced, and when."""
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    create_s: float = 0.0
    first_token_s: float = 0.0                 # query start -> first token (prefill)
    decode_ms: list[float] = field(default_factory=list)   # between successive tokens

    def summary(self) -> dict:
        d = asdict(self)
        d["decode_ms_median"] = statistics.median(self.decode_ms) if self.decode_ms else None
        return d


def wheel_dir() -> Path:
    import onnxruntime_qnn
    return Path(onnxruntime_qnn.__file__).parent


def load_genie() -> ctypes.CDLL:
    """libGenie.so with its QNN libraries preloaded globally (Genie opens them by file name)."""
    d = wheel_dir()
    if not (d / "libGenie.so").is_file():
        raise GenieError(f"libGenie.so is not in the onnxruntime-qnn wheel at {d}")
    for name in QNN_LIBS:
        ctypes.CDLL(str(d / name), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(d / "libGenie.so"), mode=ctypes.RTLD_GLOBAL)
    p = ctypes.c_void_p
    for name, args in {"GenieLog_create": [p, LOG_CB, ctypes.c_int, ctypes.POINTER(p)],
                       "GenieDialogConfig_createFromJson": [ctypes.c_char_p, ctypes.POINTER(p)],
                       "GenieDialogConfig_bindLogger": [p, p],
                       "GenieDialog_create": [p, ctypes.POINTER(p)],
                       "GenieDialog_setMaxNumTokens": [p, ctypes.c_uint32],
                       "GenieDialog_tokenQuery": [p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32,
                                                  ctypes.c_int, TOKEN_CB, p],
                       "GenieDialog_query": [p, ctypes.c_char_p, ctypes.c_int, TEXT_CB, p],
                       "GenieDialog_reset": [p], "GenieDialog_free": [p], "GenieDialogConfig_free": [p],
                       "GenieLog_free": [p]}.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int32
    return lib


@contextlib.contextmanager
def library_output_to_stderr() -> Iterator[None]:
    """The QNN libraries print to file descriptor 1: sent to stderr so stdout holds only our results."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def _check(status: int, what: str) -> None:
    if status != 0:
        raise GenieError(f"{what} failed with Genie status {status} (see Genie's log above)")


class Dialog:
    """One Genie dialog on a bundle folder."""

    def __init__(self, bundle: Path, log_level: str = "error") -> None:
        self.lib = load_genie()
        libc = ctypes.CDLL(None)
        libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]

        def on_log(_handle, fmt, level, _ts, args) -> None:   # va_list is a pointer on x86-64 / aarch64 Linux
            buf = ctypes.create_string_buffer(4096)
            libc.vsnprintf(buf, len(buf), fmt, args)
            print(f"[genie {level}] {buf.value.decode(errors='replace').rstrip()}", file=sys.stderr)

        self._log_cb = LOG_CB(on_log)
        self.log, self.config, self.handle = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        _check(self.lib.GenieLog_create(None, self._log_cb, LEVELS[log_level], ctypes.byref(self.log)),
               "GenieLog_create")
        text = (bundle / "genie_config.json").read_text()
        here = os.getcwd()
        os.chdir(bundle)
        try:
            t0 = time.perf_counter()
            _check(self.lib.GenieDialogConfig_createFromJson(text.encode(), ctypes.byref(self.config)),
                   "GenieDialogConfig_createFromJson")
            _check(self.lib.GenieDialogConfig_bindLogger(self.config, self.log), "GenieDialogConfig_bindLogger")
            _check(self.lib.GenieDialog_create(self.config, ctypes.byref(self.handle)), "GenieDialog_create")
            self.create_s = time.perf_counter() - t0
        finally:
            os.chdir(here)

    def _timed(self, result: Result, t0: float, stamps: list[float]) -> Result:
        result.create_s = self.create_s
        if stamps:
            result.first_token_s = stamps[0] - t0
            result.decode_ms = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        return result

    def token_query(self, prompt: list[int], max_new: int) -> Result:
        """Greedy (per the config's sampler) tokens after ``prompt``, through GenieDialog_tokenQuery."""
        result, stamps = Result(), []

        def on_tokens(ptr, n, _code, _user) -> None:
            stamps.extend([time.perf_counter()] * n)
            result.tokens.extend(ptr[i] for i in range(n))

        cb = TOKEN_CB(on_tokens)
        _check(self.lib.GenieDialog_setMaxNumTokens(self.handle, max_new), "GenieDialog_setMaxNumTokens")
        ids = (ctypes.c_uint32 * len(prompt))(*prompt)
        t0 = time.perf_counter()
        _check(self.lib.GenieDialog_tokenQuery(self.handle, ids, len(prompt), SENTENCE_COMPLETE, cb, None),
               "GenieDialog_tokenQuery")
        return self._timed(result, t0, stamps)

    def query(self, prompt: str, max_new: int) -> Result:
        """Text in, text out through GenieDialog_query (Genie's tokenizer)."""
        result, stamps, parts = Result(), [], []

        def on_text(s, _code, _user) -> None:
            stamps.append(time.perf_counter())
            parts.append(s.decode(errors="replace") if s else "")

        cb = TEXT_CB(on_text)
        _check(self.lib.GenieDialog_setMaxNumTokens(self.handle, max_new), "GenieDialog_setMaxNumTokens")
        t0 = time.perf_counter()
        _check(self.lib.GenieDialog_query(self.handle, prompt.encode(), SENTENCE_COMPLETE, cb, None),
               "GenieDialog_query")
        result.text = "".join(parts)
        return self._timed(result, t0, stamps)

    def reset(self) -> None:
        _check(self.lib.GenieDialog_reset(self.handle), "GenieDialog_reset")

    def close(self) -> None:
        for fn, h in (("GenieDialog_free", self.handle), ("GenieDialogConfig_free", self.config),
                      ("GenieLog_free", self.log)):
            if h:
                getattr(self.lib, fn)(h)
        self.handle = self.config = self.log = ctypes.c_void_p()


def decode(bundle: Path, tokens: list[int]) -> str:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return ""
    return Tokenizer.from_file(str(bundle / "tokenizer.json")).decode(tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-tokens", help="comma-separated token ids (GenieDialog_tokenQuery)")
    src.add_argument("--prompt", help="text (GenieDialog_query, Genie's tokenizer)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--log-level", choices=sorted(LEVELS), default="error")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    bundle = args.bundle.resolve()
    if not (bundle / "genie_config.json").is_file():
        print(f"error: {bundle} has no genie_config.json (not a Genie bundle folder)", file=sys.stderr)
        return 1
    try:
        with library_output_to_stderr():
            result = run(bundle, args)
    except (GenieError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.summary()))
        return 0
    print(f"tokens  {','.join(map(str, result.tokens))}")
    print(f"text    {result.text!r}")
    med = statistics.median(result.decode_ms) if result.decode_ms else float("nan")
    print(f"timing  dialog create {result.create_s:.2f} s, first token {result.first_token_s * 1e3:.1f} ms, "
          f"decode {med:.1f} ms/token (median of {len(result.decode_ms)})")
    return 0


def run(bundle: Path, args: argparse.Namespace) -> Result:
    """One dialog, one query, as the command line asks."""
    dialog = Dialog(bundle, args.log_level)
    try:
        if args.prompt_tokens is not None:
            ids = [int(t) for t in args.prompt_tokens.split(",") if t.strip()]
            result = dialog.token_query(ids, args.max_new_tokens)
            result.text = decode(bundle, result.tokens)
            return result
        return dialog.query(args.prompt, args.max_new_tokens)
    finally:
        dialog.close()


if __name__ == "__main__":
    sys.exit(main())
