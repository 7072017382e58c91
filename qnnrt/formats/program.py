"""The qnnrt program manifest (``program.json``): read, validate, write. See docs/program-format.md.

A program is a folder holding ``program.json``, one EPContext ``.onnx`` per method and the context
binaries under ``contexts/``. ``read_program`` checks the manifest's shape, that every file it names
exists inside the folder, and that every binary has the size the manifest records; it raises
``FormatError`` naming the file, the field and what to do. ``check_method_files`` additionally opens the
method models and checks that their EPContext nodes name binaries and graphs listed in the manifest.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from qnnrt.errors import FormatError
from qnnrt.fileio import read_json

FORMAT_NAME = "qnnrt-program"
FORMAT_VERSION = 1
MANIFEST = "program.json"


@dataclass
class MethodEntry:
    name: str
    model: str                       # path relative to the program folder
    folder: Path | None = None

    @property
    def path(self) -> Path:
        return _join(self.folder, self.model)

    def to_json(self) -> dict:
        return {"name": self.name, "model": self.model}


@dataclass
class ContextEntry:
    name: str
    path: str                        # relative to the program folder
    size: int
    graphs: list[str]
    folder: Path | None = None
    sha256: str | None = None        # hex digest; programs qnnrt writes carry it (verified at load)

    @property
    def file(self) -> Path:
        return _join(self.folder, self.path)

    def to_json(self) -> dict:
        out = {"name": self.name, "path": self.path, "size": self.size, "graphs": list(self.graphs)}
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        return out


@dataclass
class ProgramManifest:
    folder: Path
    methods: list[MethodEntry]
    contexts: list[ContextEntry]
    target: dict = field(default_factory=dict)
    build: dict = field(default_factory=dict)
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    @property
    def soc_model(self) -> int | None:
        return self.target.get("soc_model")

    @property
    def htp_arch(self) -> int | None:
        return self.target.get("htp_arch")

    def method(self, name: str) -> MethodEntry:
        for m in self.methods:
            if m.name == name:
                return m
        raise FormatError(f"{self.manifest_path}: no method {name!r}; methods: "
                          f"{', '.join(m.name for m in self.methods)}")

    def context(self, name: str) -> ContextEntry:
        for c in self.contexts:
            if c.name == name:
                return c
        raise FormatError(f"{self.manifest_path}: no context {name!r}")

    def context_by_path(self, rel_path: str) -> ContextEntry:
        norm = PurePosixPath(rel_path).as_posix()
        for c in self.contexts:
            if PurePosixPath(c.path).as_posix() == norm:
                return c
        raise FormatError(f"{self.manifest_path}: no context binary at {rel_path!r}")

    def context_of_graph(self, graph: str) -> ContextEntry:
        for c in self.contexts:
            if graph in c.graphs:
                return c
        raise FormatError(f"{self.manifest_path}: no context binary holds graph {graph!r}")

    @property
    def total_context_bytes(self) -> int:
        return sum(c.size for c in self.contexts)

    def to_json(self) -> dict:
        return {"format": self.format, "version": self.version, "target": dict(self.target),
                "methods": [m.to_json() for m in self.methods],
                "contexts": [c.to_json() for c in self.contexts], "build": dict(self.build)}


def _join(folder: Path | None, rel: str) -> Path:
    return (folder or Path(".")) / Path(*PurePosixPath(rel).parts)


def _fail(where: str, what: str, todo: str) -> FormatError:
    return FormatError(f"{where}: {what}. {todo}")


MAX_NAME_CHARS = 4096
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_name(value: str | bytes, where: str, what: str = "name") -> str:
    """A name or path from a file: UTF-8, no NUL, bounded length (protobuf hands over invalid
    UTF-8 strings as bytes)."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _fail(where, f"the {what} {value[:60]!r} is not valid UTF-8 (byte {e.start})",
                        "Fix or rebuild the file.") from None
    if not isinstance(value, str):
        raise _fail(where, f"the {what} is a {type(value).__name__}, not text", "Fix or rebuild the file.")
    if "\0" in value:
        raise _fail(where, f"the {what} {value[:60]!r} contains a NUL byte", "Fix or rebuild the file.")
    if len(value) > MAX_NAME_CHARS:
        raise _fail(where, f"the {what} is {len(value)} characters long (at most {MAX_NAME_CHARS})",
                    "Fix or rebuild the file.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(where, f"the {what} {value[:60]!r} is not valid UTF-8 (lone surrogate)",
                    "Fix or rebuild the file.") from None
    return value


def check_inside(folder: Path, rel: str, where: str, must_exist: bool = True) -> Path:
    """`folder/rel` resolved (symbolic links followed) and checked to stay inside `folder`.

    Refuses absolute paths, '..', NUL bytes, symlinks leading outside and symlink loops."""
    check_name(rel, where, "path")
    p = PurePosixPath(rel)
    if p.is_absolute() or "\\" in rel or (len(rel) > 1 and rel[1] == ":"):
        raise _fail(where, f"path {rel!r} is absolute", "Paths must be relative to the program folder.")
    if ".." in p.parts:
        raise _fail(where, f"path {rel!r} escapes the program folder",
                    "Paths must stay inside the program folder (no '..').")
    full = _join(folder, rel)
    try:
        root = folder.resolve(strict=True)
        resolved = full.resolve(strict=must_exist)
    except FileNotFoundError:
        raise _fail(where, f"file {rel!r} is missing ({full})",
                    "Copy the whole program folder, or rebuild it with `qnnrt build`.") from None
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: a symlink loop (3.11)
        raise _fail(where, f"cannot resolve {rel!r} ({type(e).__name__}: {e}); a symbolic link "
                    f"loop or an unreadable folder", "Replace the links with the files.") from None
    if resolved != root and root not in resolved.parents:
        raise _fail(where, f"path {rel!r} resolves to {resolved}, outside the program folder {root}",
                    "Replace the symbolic link with the file itself.")
    if must_exist:
        try:
            ok = resolved.is_file()
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise _fail(where, f"{rel!r} is not a regular file ({full})",
                        "Copy the whole program folder, or rebuild it with `qnnrt build`.")
    return resolved


def _check_rel_path(folder: Path, rel, where: str, must_exist: bool = True) -> Path:
    if not isinstance(rel, str) or not rel:
        raise _fail(where, f"expected a relative path string, got {rel!r}",
                    "Write paths relative to the program folder, e.g. \"contexts/ctx_000.bin\".")
    check_inside(folder, rel, where, must_exist)
    return _join(folder, rel)


def _expect(obj: dict, key: str, kind, where: str, optional: bool = False):
    if key not in obj:
        if optional:
            return None
        raise _fail(where, f"missing field {key!r}", "See docs/program-format.md for the required fields.")
    value = obj[key]
    if kind is int and isinstance(value, bool):
        value = None
    if value is None or not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _fail(where, f"field {key!r} must be a {name}, got {obj[key]!r}",
                    "See docs/program-format.md.")
    return value


def parse_manifest(data, folder: Path, check_files: bool = True) -> ProgramManifest:
    """Validate a decoded ``program.json`` (``data``) belonging to ``folder``."""
    where = str(folder / MANIFEST)
    if not isinstance(data, dict):
        raise _fail(where, "the manifest is not a JSON object", "See docs/program-format.md.")
    fmt = data.get("format")
    if fmt != FORMAT_NAME:
        raise _fail(where, f"format is {fmt!r}, not {FORMAT_NAME!r}",
                    "This is not a qnnrt program manifest; build one with `qnnrt build`.")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _fail(where, f"version must be an integer, got {version!r}", "See docs/program-format.md.")
    if version != FORMAT_VERSION:
        raise _fail(where, f"program format version {version} is not supported (this qnnrt reads "
                    f"version {FORMAT_VERSION})", "Upgrade qnnrt, or rebuild the program with this qnnrt.")
    target = _expect(data, "target", dict, where, optional=True) or {}
    for k in ("soc_model", "htp_arch"):
        v = target.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise _fail(where, f"target.{k} must be an integer or null, got {v!r}", "See docs/program-format.md.")
    build = _expect(data, "build", dict, where, optional=True) or {}

    methods_raw = _expect(data, "methods", list, where)
    if not methods_raw:
        raise _fail(where, "'methods' is empty", "A program needs at least one method.")
    methods: list[MethodEntry] = []
    for i, m in enumerate(methods_raw):
        w = f"{where}: methods[{i}]"
        if not isinstance(m, dict):
            raise _fail(w, f"expected an object, got {m!r}", "See docs/program-format.md.")
        name = check_name(_expect(m, "name", str, w), f"{w}.name")
        if not name:
            raise _fail(w, "empty method name", "Give every method a name.")
        if any(x.name == name for x in methods):
            raise _fail(w, f"duplicate method name {name!r}", "Method names must be unique.")
        model = _expect(m, "model", str, w)
        _check_rel_path(folder, model, f"{w}.model", must_exist=check_files)
        methods.append(MethodEntry(name, model, folder))

    contexts_raw = _expect(data, "contexts", list, where)
    contexts: list[ContextEntry] = []
    seen_graphs: dict[str, str] = {}
    seen_paths: set[str] = set()
    for i, c in enumerate(contexts_raw):
        w = f"{where}: contexts[{i}]"
        if not isinstance(c, dict):
            raise _fail(w, f"expected an object, got {c!r}", "See docs/program-format.md.")
        name = check_name(_expect(c, "name", str, w), f"{w}.name")
        if not name or any(x.name == name for x in contexts):
            raise _fail(w, f"context name {name!r} is empty or duplicated", "Context names must be unique.")
        rel = _expect(c, "path", str, w)
        norm = PurePosixPath(rel).as_posix()
        if norm in seen_paths:
            raise _fail(w, f"path {rel!r} is listed twice", "List each context binary once.")
        seen_paths.add(norm)
        full = _check_rel_path(folder, rel, f"{w}.path", must_exist=check_files)
        size = _expect(c, "size", int, w)
        if size < 0:
            raise _fail(w, f"negative size {size}", "See docs/program-format.md.")
        sha = _expect(c, "sha256", str, w, optional=True)
        if sha is not None and not _SHA256.fullmatch(sha):
            raise _fail(w, f"sha256 {sha[:80]!r} is not 64 lowercase hex digits",
                        "Rebuild the program with `qnnrt build`.")
        graphs = _expect(c, "graphs", list, w)
        if not graphs or not all(isinstance(g, str) and g for g in graphs):
            raise _fail(w, f"'graphs' must be a non-empty list of graph names, got {graphs!r}",
                        "List every graph the binary holds.")
        if len(set(graphs)) != len(graphs):
            raise _fail(w, f"duplicate graph names in {graphs!r}", "Graph names are unique within a binary.")
        for g in graphs:
            check_name(g, f"{w}.graphs", "graph name")
            if g in seen_graphs:
                raise _fail(w, f"graph {g!r} is also listed in context {seen_graphs[g]!r}",
                            "A graph name must identify one binary within a program.")
            seen_graphs[g] = name
        if check_files:
            actual = full.stat().st_size
            if actual != size:
                raise _fail(w, f"{rel!r} is {actual} bytes but the manifest says {size}",
                            "The binary was truncated or replaced; copy it again or rebuild the program.")
        contexts.append(ContextEntry(name, rel, size, list(graphs), folder, sha256=sha))
    return ProgramManifest(folder=folder, methods=methods, contexts=contexts, target=dict(target),
                           build=dict(build), format=fmt, version=version)


def read_program(folder: str | os.PathLike, check_files: bool = True) -> ProgramManifest:
    """Read and validate ``folder/program.json`` (``folder`` may also be the manifest's path)."""
    folder = Path(folder)
    if folder.name == MANIFEST and folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise FormatError(f"{folder}: not a program folder (no such directory). "
                          "Give the folder `qnnrt build` wrote.")
    path = folder / MANIFEST
    if not path.is_file():
        raise FormatError(f"{folder}: no {MANIFEST} in this folder. Give the folder `qnnrt build` wrote, "
                          "or build one with `qnnrt build MODEL.onnx -o FOLDER`.")
    data = read_json(path, "manifest")
    return parse_manifest(data, folder, check_files=check_files)


def write_program(folder: str | os.PathLike, methods: list[MethodEntry], contexts: list[ContextEntry],
                  target: dict | None = None, build: dict | None = None) -> ProgramManifest:
    """Write ``folder/program.json`` for files already in place, then read it back (validating it)."""
    folder = Path(folder)
    manifest = ProgramManifest(folder=folder, methods=list(methods), contexts=list(contexts),
                               target=dict(target or {}), build=dict(build or {}))
    from qnnrt.fileio import write_atomic
    write_atomic(folder / MANIFEST, json.dumps(manifest.to_json(), indent=2) + "\n", "program manifest")
    return read_program(folder)


def check_method_files(manifest: ProgramManifest) -> dict[str, list[tuple[str, str]]]:
    """Open every method model and check its EPContext nodes against the manifest.

    Returns {method: [(context name, graph name), ...]} in node order. Raises FormatError for an
    EPContext node whose binary or graph the manifest does not list, or that escapes the folder.
    """
    import onnx
    out: dict[str, list[tuple[str, str]]] = {}
    for m in manifest.methods:
        where = f"{m.path}"
        try:
            model = onnx.load(str(m.path), load_external_data=False)
        except Exception as e:
            raise FormatError(f"{where}: not a readable ONNX model ({e}). Rebuild the program.") from e
        model_dir = PurePosixPath(PurePosixPath(m.model).parent)
        calls = []
        for node in model.graph.node:
            if node.op_type != "EPContext":
                continue
            attrs = {a.name: a for a in node.attribute}
            w = f"{where}: EPContext node {node.name!r}"
            embed = attrs["embed_mode"].i if "embed_mode" in attrs else 1
            if embed != 0:
                raise FormatError(f"{w}: embed_mode {embed}; qnnrt programs keep binaries in contexts/ "
                                  "(embed_mode 0). Rebuild the program.")
            if "ep_cache_context" not in attrs:
                raise FormatError(f"{w}: no ep_cache_context attribute. Rebuild the program.")
            rel = attrs["ep_cache_context"].s.decode("utf-8", "replace")
            full = (model_dir / rel).as_posix() if str(model_dir) != "." else PurePosixPath(rel).as_posix()
            _check_rel_path(manifest.folder, full, f"{w}.ep_cache_context")
            ctx = manifest.context_by_path(PurePosixPath(os.path.normpath(full)).as_posix())
            graph = attrs["partition_name"].s.decode() if "partition_name" in attrs else node.name
            if graph not in ctx.graphs:
                raise FormatError(f"{w}: graph {graph!r} is not among the graphs the manifest lists for "
                                  f"{ctx.path} ({len(ctx.graphs)} graphs). Rebuild the program.")
            calls.append((ctx.name, graph))
        out[m.name] = calls
    return out


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MANIFEST", "MethodEntry", "ContextEntry", "ProgramManifest",
           "parse_manifest", "read_program", "write_program", "check_method_files"]
