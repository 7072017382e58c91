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
    """``dialog.context``: the context length Genie runs with, the vocabulary, BOS and stop ids."""
    size: int
    n_vocab: int
    bos: int | None
    eos: tuple[int, ...]


@dataclass(frozen=True)
class SamplerConfig:
    """``dialog.sampler``: the defaults a generation samples with (temp 0 or greedy: argmax)."""
    seed: int | None
    temperature: float
    top_k: int
    top_p: float
    greedy: bool


@dataclass(frozen=True)
class RopeScaling:
    """``rope-scaling`` (Llama 3's frequency-dependent scaling)."""
    rope_type: str
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


@dataclass(frozen=True)
class RopeConfig:
    """RoPE as Genie computes it on the host: `dim` frequencies (head_dim / 2), base `theta`."""
    dim: int
    theta: float
    scaling: RopeScaling | None = None


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
    c = f.need("context")
    size = c.integer("size", required=True)
    vocab = c.integer("n-vocab", required=True)
    assert size is not None and vocab is not None
    if size < 2:
        raise c.fail("size", f"is {size}; a context holds at least 2 tokens")
    eos_raw = c.data.get("eos-token", [])
    eos_list = eos_raw if isinstance(eos_raw, list) else [eos_raw]
    if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < vocab for e in eos_list):
        raise c.fail("eos-token", f"is {eos_raw!r}; give a token id or a list of them below n-vocab {vocab}")
    bos = c.integer("bos-token")
    if bos is not None and bos >= vocab:
        raise c.fail("bos-token", f"is {bos}, not below n-vocab {vocab}")
    return DialogContext(size, vocab, bos, tuple(eos_list))


def _sampler(f: _Fields) -> SamplerConfig:
    s = f.obj("sampler", required=False) or _Fields({}, f.place("sampler"), f.file)
    temp = s.number("temp", 0.0)
    top_p = s.number("top-p", 1.0)
    if temp < 0:
        raise s.fail("temp", f"is {temp}; give 0 (greedy) or more")
    if not 0 < top_p <= 1:
        raise s.fail("top-p", f"is {top_p}; give a number in (0, 1]")
    greedy = s.flag("greedy", False) or s.text("type", "basic") == "greedy"
    return SamplerConfig(s.integer("seed"), temp, s.integer("top-k", 0) or 0, top_p, greedy)


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


def _rope(engine: _Fields, model: _Fields) -> RopeConfig | None:
    pe = model.obj("positional-encoding", required=False)
    htp = engine.need("backend").obj("QnnHtp", required=False)
    if pe is None:
        if htp is None or "rope-theta" not in htp.data:
            return None
        dim = htp.integer("pos-id-dim", required=True)
        assert dim is not None
        return RopeConfig(dim, htp.number("rope-theta", 10000.0))
    kind = pe.text("type", "rope")
    if kind != "rope":
        raise pe.fail("type", f"is {kind!r}; qnnrt computes RoPE ('rope') positions only")
    dim = pe.integer("rope-dim", required=True)
    assert dim is not None
    if dim < 1:
        raise pe.fail("rope-dim", "is 0; give head_dim / 2")
    sc = pe.obj("rope-scaling", required=False)
    scaling = None
    if sc is not None:
        rtype = sc.text("rope-type", "llama3") or "llama3"
        if rtype not in ("llama3", "default"):
            raise sc.fail("rope-type", f"is {rtype!r}; qnnrt computes 'llama3' scaling (or 'default')")
        if rtype == "llama3":
            scaling = RopeScaling(rtype, sc.number("factor", 8.0), sc.number("low-freq-factor", 1.0),
                                  sc.number("high-freq-factor", 4.0),
                                  sc.integer("original-max-position-embeddings", 8192) or 8192)
    return RopeConfig(dim, pe.number("rope-theta", 10000.0), scaling)


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
    binary = model.need("binary")
    bins = binary.data.get("ctx-bins")
    if not isinstance(bins, list) or not bins or not all(isinstance(b, str) and b for b in bins):
        raise binary.fail("ctx-bins", f"is {bins!r}; give the list of the model's part context "
                                      f"binaries, in order")
    paths = [_existing(name, f"{binary.place('ctx-bins')}[{i}]", cfg, folder) for i, name in enumerate(bins)]
    return GenieConfig(folder, cfg, context, _sampler(dialog), tokenizer, backend, tuple(paths),
                       _rope(engine, model))
