"""Qualcomm Genie LLM bundles (what Qualcomm AI Hub ships): a folder of ``genie_config.json``, the
HTP backend extensions file it names (``htp_backend_ext_config.json``), ``tokenizer.json`` and the
model's part context binaries (``engine.model.binary.ctx-bins``). Read here as plain typed data,
every field checked with an error naming the file, the field and what to do; no QNN calls.

Conventions (quic/ai-hub-models qai_hub_models/utils/llm_helpers.py ``create_genie_config``): the
RoPE settings are ``engine.model.positional-encoding`` (``rope-dim`` = head_dim / 2 frequencies,
``rope-theta``, optional ``rope-scaling``), or, without scaling, ``QnnHtp.rope-theta`` and
``QnnHtp.pos-id-dim``; paths are relative to the config's folder."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnnrt.errors import FormatError
from qnnrt.fileio import read_json

CONFIG_NAME = "genie_config.json"


@dataclass(frozen=True)
class DialogContext:
    """``dialog.context``: the context length Genie runs with, the vocabulary it declares (Genie
    samples over the logits' width whatever it says), BOS (None: -1 or absent, none is added) and
    the stop ids: ``eos-token`` (one or a list; -1 is none) and ``eot-token`` (end of turn)."""
    size: int
    n_vocab: int
    bos: int | None
    eos: tuple[int, ...]
    eot: int | None = None


@dataclass(frozen=True)
class TokenPenalty:
    """``sampler.token-penalty``: Genie penalizes the last ``last_n`` tokens of the sequence (the
    prompt's included, each distinct token once); 0 (the default) penalizes none."""
    last_n: int
    repetition: float
    presence: float
    frequency: float


# Genie's sampler defaults where a field is absent (measured with libGenie.so: docs/genie.md)
GENIE_TEMP, GENIE_TOP_K, GENIE_TOP_P = 0.8, 0, 0.8


@dataclass(frozen=True)
class SamplerConfig:
    """``dialog.sampler``: the defaults a generation samples with. Genie argmaxes at temp 0 or
    top-k 1 and ignores ``greedy`` (kept here to be reported); seed None: -1 or absent (random)."""
    seed: int | None
    temperature: float
    top_k: int
    top_p: float
    greedy: bool
    penalty: TokenPenalty | None = None


@dataclass(frozen=True)
class RopeScaling:
    """``rope-scaling`` (Llama 3's frequency-dependent scaling)."""
    rope_type: str
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


@dataclass(frozen=True)
class LongRope:
    """``rope-type: longrope`` (Phi-3's): per-frequency factors, the long ones when the context is
    longer than ``original_max_positions``, and cos / sin scaled by sqrt(1 + ln factor / ln original)."""
    factor: float
    original_max_positions: int
    long_factor: tuple[float, ...]
    short_factor: tuple[float, ...]
    rope_type: str = "longrope"


@dataclass(frozen=True)
class RopeConfig:
    """RoPE as Genie computes it on the host: `dim` frequencies (head_dim / 2), base `theta`;
    `note` says what of the config Genie (and so qnnrt) leaves unused."""
    dim: int
    theta: float
    scaling: RopeScaling | LongRope | None = None
    note: str | None = None


@dataclass(frozen=True)
class HtpExtensions:
    """The backend extensions file (htp_backend_ext_config.json)."""
    path: Path
    soc_model: int | None
    dsp_arch: str | None
    perf_profile: str | None
    shared_buffer: bool
    weight_sharing: bool


@dataclass(frozen=True)
class HtpBackend:
    """``engine.backend``: QnnHtp options qnnrt reads and the extensions file."""
    use_mmap: bool
    poll: bool
    kv_dim: int | None
    extensions: HtpExtensions | None


@dataclass(frozen=True)
class GenieConfig:
    """A whole bundle: `folder` holds `config_path`; every path is resolved and exists."""
    folder: Path
    config_path: Path
    context: DialogContext
    sampler: SamplerConfig
    tokenizer: Path
    backend: HtpBackend
    ctx_bins: tuple[Path, ...]
    rope: RopeConfig | None
    stop_sequences: tuple[str, ...] = ()       # dialog.stop-sequence: text that ends a generation


def config_file(path: str | os.PathLike[str]) -> Path | None:
    """The genie_config.json of a bundle folder (or the file itself), None when `path` is not one."""
    p = Path(path)
    if p.is_dir():
        f = p / CONFIG_NAME
        return f if f.is_file() else None
    return p if p.name == CONFIG_NAME and p.is_file() else None


def is_genie_bundle(path: str | os.PathLike[str]) -> bool:
    return config_file(path) is not None


class _Fields:
    """Typed reads from one JSON object at a dotted place in a file (errors say the place)."""

    def __init__(self, data: Any, where: str, file: Path) -> None:
        if not isinstance(data, dict):
            raise FormatError(f"{file}: {where or 'the top level'} must be a JSON object, got "
                              f"{type(data).__name__}; see Genie's genie_config.json layout")
        self.data, self.where, self.file = data, where, file

    def place(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, what: str) -> FormatError:
        return FormatError(f"{self.file}: {self.place(key)} {what}")

    def obj(self, key: str, required: bool = True) -> _Fields | None:
        if key not in self.data:
            if required:
                raise self.fail(key, "is missing; a Genie config has it (an object)")
            return None
        return _Fields(self.data[key], self.place(key), self.file)

    def need(self, key: str) -> _Fields:
        f = self.obj(key)
        assert f is not None
        return f

    def integer(self, key: str, default: int | None = None, required: bool = False) -> int | None:
        v = self.data.get(key, default)
        if v is None:
            if required:
                raise self.fail(key, "is missing; give an integer")
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(key, f"is {v!r}; give a non-negative integer")
        return v

    def token(self, key: str) -> int | None:
        """A token id where -1 (Genie's "unset") and absence are None."""
        v = self.data.get(key)
        if v is None or v == -1:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(key, f"is {v!r}; give a token id, or -1 for none")
        return v

    def numbers(self, key: str, length: int) -> tuple[float, ...]:
        v = self.data.get(key)
        if not isinstance(v, list) or len(v) != length or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v):
            raise self.fail(key, f"is {v!r}; give {length} positive numbers (one per rope-dim frequency)")
        return tuple(float(x) for x in v)

    def number(self, key: str, default: float) -> float:
        v = self.data.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise self.fail(key, f"is {v!r}; give a number")
        return float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, f"is {v!r}; give true or false")
        return v

    def text(self, key: str, default: str | None = None) -> str | None:
        v = self.data.get(key, default)
        if v is not None and not isinstance(v, str):
            raise self.fail(key, f"is {v!r}; give a string")
        return v

    def file_path(self, key: str, folder: Path) -> Path:
        """A file named relative to `folder`, which must exist."""
        name = self.text(key)
        if not name:
            raise self.fail(key, "is missing; name the file (relative to the config's folder)")
        return _existing(name, self.place(key), self.file, folder)


def _existing(name: str, place: str, file: Path, folder: Path) -> Path:
    """`folder/name`, an existing regular file inside the bundle folder once symbolic links are
    resolved (as program.json's paths are): a bundle never makes qnnrt read outside itself."""
    p = folder / name
    try:
        root = folder.resolve(strict=True)
        resolved = p.resolve(strict=True)
    except FileNotFoundError:
        raise FormatError(f"{file}: {place} names {name!r}, but {p} does not exist; put the file "
                          f"in the bundle or correct the path") from None
    except (OSError, RuntimeError, ValueError) as e:         # RuntimeError: a symbolic link loop
        raise FormatError(f"{file}: {place} names {name!r}, which cannot be resolved ({type(e).__name__}: {e}); "
                          f"replace the links with the files") from None
    if root not in resolved.parents:
        raise FormatError(f"{file}: {place} names {name!r}, which is {resolved}, outside the bundle folder "
                          f"{root}; a Genie bundle must hold its files: name them relative to its folder "
                          f"(no absolute path, no '..', no link out of it)")
    if not resolved.is_file():
        raise FormatError(f"{file}: {place} names {name!r}, which is not a regular file")
    return p


def _read_json(path: Path) -> Any:
    """Through qnnrt's one bounded JSON reader (size, depth, numbers, UTF-8), errors naming the file."""
    return read_json(path, path.name)


def _context(f: _Fields) -> DialogContext:
    """Token ids are checked against the graphs' logits (llm/genie_layout.py), not n-vocab: Genie
    runs a config whose n-vocab differs from them (Qualcomm's qwen2_5_7b tutorial config)."""
    c = f.need("context")
    size = c.integer("size", required=True)
    vocab = c.integer("n-vocab", required=True)
    assert size is not None and vocab is not None
    if size < 2:
        raise c.fail("size", f"is {size}; a context holds at least 2 tokens")
    eos_raw = c.data.get("eos-token", [])
    eos_list = eos_raw if isinstance(eos_raw, list) else [eos_raw]
    if not all(isinstance(e, int) and not isinstance(e, bool) and e >= -1 for e in eos_list):
        raise c.fail("eos-token", f"is {eos_raw!r}; give a token id or a list of them (-1: none)")
    return DialogContext(size, vocab, c.token("bos-token"), tuple(e for e in eos_list if e != -1),
                         c.token("eot-token"))


def _sampler(f: _Fields) -> SamplerConfig:
    if "sampler" not in f.data:     # Genie's schema allows it, but GenieDialog_create fails without one
        raise f.fail("sampler", "is missing; give one ({\"version\": 1} takes Genie's defaults): Genie "
                                "cannot create a dialog without it")
    s = f.need("sampler")
    kind = s.text("type", "basic")
    if kind != "basic":
        raise s.fail("type", f"is {kind!r}; qnnrt runs Genie's 'basic' sampler (a 'custom' one is a callback "
                             f"registered with Genie's API)")
    temp = s.number("temp", GENIE_TEMP)
    top_p = s.number("top-p", GENIE_TOP_P)
    if temp < 0:
        raise s.fail("temp", f"is {temp}; give 0 (greedy) or more")
    if not 0 <= top_p <= 1:
        raise s.fail("top-p", f"is {top_p}; give a number in [0, 1]")
    seed = s.data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < -1):
        raise s.fail("seed", f"is {seed!r}; give a non-negative integer, or -1 for a random seed")
    top_k = s.integer("top-k", GENIE_TOP_K) or 0
    if top_p == 0:          # the nucleus keeps the best token alone
        top_k, top_p = 1, 1.0
    return SamplerConfig(None if seed in (None, -1) else seed, temp, top_k, top_p, s.flag("greedy", False),
                         _penalty(s))


def _penalty(s: _Fields) -> TokenPenalty | None:
    p = s.obj("token-penalty", required=False)
    if p is None:
        return None
    rep = p.number("repetition-penalty", 1.0)
    if rep <= 0:
        raise p.fail("repetition-penalty", f"is {rep}; give a number above 0 (1: none)")
    return TokenPenalty(p.integer("penalize-last-n", 0) or 0, rep, p.number("presence-penalty", 0.0),
                        p.number("frequency-penalty", 0.0))


def _extensions(path: Path) -> HtpExtensions:
    f = _Fields(_read_json(path), "", path)
    devices = f.data.get("devices", [])
    if not isinstance(devices, list):
        raise f.fail("devices", f"is {devices!r}; give a list of device objects")
    soc = arch = perf = None
    if devices:
        d = _Fields(devices[0], "devices[0]", path)
        soc = d.integer("soc_model")
        arch = d.text("dsp_arch")
        cores = d.data.get("cores", [])
        if isinstance(cores, list) and cores:
            perf = _Fields(cores[0], "devices[0].cores[0]", path).text("perf_profile")
    mem = f.obj("memory", required=False)
    mem_type = mem.text("mem_type") if mem is not None else None
    ctx = f.obj("context", required=False)
    sharing = ctx.flag("weight_sharing_enabled", False) if ctx is not None else False
    return HtpExtensions(path, soc, arch, perf, mem_type == "shared_buffer", sharing)


def _backend(engine: _Fields, folder: Path) -> HtpBackend:
    b = engine.need("backend")
    kind = b.text("type")
    if kind != "QnnHtp":
        raise b.fail("type", f"is {kind!r}; qnnrt runs Genie bundles of the QnnHtp backend")
    htp = b.obj("QnnHtp", required=False) or _Fields({}, b.place("QnnHtp"), b.file)
    ext = b.file_path("extensions", folder) if b.data.get("extensions") else None
    return HtpBackend(htp.flag("use-mmap", True), htp.flag("poll", True), htp.integer("kv-dim"),
                      _extensions(ext) if ext is not None else None)


DEFAULT_PREFIX = "default_"     # a positional encoding for position_ids_cos / _sin (other prefixes name others)


def _rope(engine: _Fields, model: _Fields) -> RopeConfig | None:
    """``positional-encoding`` (one object, or a list whose default-prefix item applies to
    position_ids_cos / _sin), else QnnHtp's ``rope-theta`` and ``pos-id-dim``; Genie refuses both."""
    htp = engine.need("backend").obj("QnnHtp", required=False)
    raw = model.data.get("positional-encoding")
    if raw is None:
        if htp is None or "rope-theta" not in htp.data:
            return None
        dim = htp.integer("pos-id-dim", required=True)
        assert dim is not None
        return RopeConfig(dim, htp.number("rope-theta", 10000.0))
    place = model.place("positional-encoding")
    if htp is not None and ("rope-theta" in htp.data or "pos-id-dim" in htp.data):
        raise model.fail("positional-encoding", "is given beside QnnHtp rope-theta / pos-id-dim; Genie refuses "
                                                "the two together: keep one")
    if isinstance(raw, list) and not raw:
        raise model.fail("positional-encoding", "is an empty list; give one encoding (an object)")
    items = [_Fields(x, f"{place}[{i}]", model.file) for i, x in enumerate(raw)] if isinstance(raw, list) \
        else [_Fields(raw, place, model.file)]
    for pe in items:
        prefix = pe.text("prefix", DEFAULT_PREFIX)
        if prefix != DEFAULT_PREFIX:
            raise pe.fail("prefix", f"is {prefix!r}: an encoding of the inputs {prefix}position_ids_cos / _sin; "
                                    f"qnnrt computes the default one (position_ids_cos / _sin) only")
    if len(items) > 1:
        raise model.fail("positional-encoding", f"has {len(items)} encodings with the default prefix; give one")
    pe = items[0]
    kind = pe.text("type", "rope")
    if kind != "rope":
        raise pe.fail("type", f"is {kind!r}; qnnrt computes RoPE ('rope') positions only")
    dim = pe.integer("rope-dim", required=True)
    assert dim is not None
    if dim < 1:
        raise pe.fail("rope-dim", "is 0; give head_dim / 2")
    scaling, note = _scaling(pe, dim)
    return RopeConfig(dim, pe.number("rope-theta", 10000.0), scaling, note)


def _scaling(pe: _Fields, dim: int) -> tuple[RopeScaling | LongRope | None, str | None]:
    """(the scaling, a note on what Genie leaves unused). Genie reads ``rope-scaling`` only when it
    names its ``rope-type`` (its schema says so; measured: the same tokens as without the block)."""
    sc = pe.obj("rope-scaling", required=False)
    if sc is None:
        return None, None
    rtype = sc.text("rope-type")
    if rtype is None:
        return None, "rope-scaling has no rope-type: unused, as Genie leaves it"
    if rtype == "default":
        return None, None
    if rtype == "llama3":
        return RopeScaling(rtype, sc.number("factor", 8.0), sc.number("low-freq-factor", 1.0),
                           sc.number("high-freq-factor", 4.0),
                           int(sc.number("original-max-position-embeddings", 8192))), None
    if rtype == "longrope":
        for key in ("factor", "original-max-position-embeddings"):
            if key not in sc.data:      # without factor Genie wants max-position-embeddings, which its schema refuses
                raise sc.fail(key, "is missing; longrope needs factor, original-max-position-embeddings, "
                                   "long-factor and short-factor (as Genie does)")
        factor, original = sc.number("factor", 1.0), sc.number("original-max-position-embeddings", 1.0)
        if factor <= 0 or original < 2:
            raise sc.fail("factor", f"is {factor} with original-max-position-embeddings {original}; give "
                                    f"positive numbers (the context grows by factor over original)")
        return LongRope(factor, int(original), sc.numbers("long-factor", dim), sc.numbers("short-factor", dim)), None
    raise sc.fail("rope-type", f"is {rtype!r}; qnnrt computes 'llama3', 'longrope' or 'default' scaling")


def read_genie_config(path: str | os.PathLike[str]) -> GenieConfig:
    """Read and check a bundle (its folder or its genie_config.json): every field qnnrt uses, every
    file it names."""
    cfg = config_file(path)
    if cfg is None:
        raise FormatError(f"{path}: no {CONFIG_NAME} there; a Genie bundle is a folder holding it")
    folder = cfg.parent
    top = _Fields(_read_json(cfg), "", cfg)
    dialog = top.need("dialog")
    kind = dialog.text("type", "basic")
    if kind != "basic":
        raise dialog.fail("type", f"is {kind!r}; qnnrt runs 'basic' dialogs (one model, no draft "
                                  f"model or other pipeline)")
    context = _context(dialog)
    tokenizer = dialog.need("tokenizer").file_path("path", folder)
    engine = dialog.need("engine")
    backend = _backend(engine, folder)
    model = engine.need("model")
    mtype = model.text("type", "binary")
    if mtype != "binary":
        raise model.fail("type", f"is {mtype!r}; qnnrt runs 'binary' models (context binaries)")
    return GenieConfig(folder, cfg, context, _sampler(dialog), tokenizer, backend,
                       _ctx_bins(model.need("binary"), folder), _rope(engine, model), _stops(dialog))


def _ctx_bins(binary: _Fields, folder: Path) -> tuple[Path, ...]:
    """``ctx-bins``, or its alias ``fcb`` (Genie takes exactly one of the two)."""
    keys = [k for k in ("ctx-bins", "fcb") if k in binary.data]
    if len(keys) != 1:
        raise binary.fail("ctx-bins", "and fcb are both given; Genie takes one of the two" if keys else
                          "is missing; give the list of the model's part context binaries, in order")
    key = keys[0]
    bins = binary.data[key]
    if not isinstance(bins, list) or not bins or not all(isinstance(b, str) and b.strip() for b in bins):
        raise binary.fail(key, f"is {bins!r}; give the list of the model's part context binaries, in order")
    return tuple(_existing(name.strip(), f"{binary.place(key)}[{i}]", binary.file, folder)
                 for i, name in enumerate(bins))


def _stops(dialog: _Fields) -> tuple[str, ...]:
    v = dialog.data.get("stop-sequence", [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise dialog.fail("stop-sequence", f"is {v!r}; give a list of strings")
    return tuple(x for x in v if x)
