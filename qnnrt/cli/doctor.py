"""`qnnrt doctor [--json] [--probe-pd]`: what this machine's set-up can run, and for each problem
what to do. Exit 0 when runs would work, 1 otherwise.

Checks, in order (a failed step skips those that need it): platform and Python; qnnrt version;
where the QNN backend and system libraries are (and why: the search order), or every place looked;
QNN core / HTP / system API versions and build id; backend and device creation; the SoC and HTP arch
the device reports; on device backends the HTP skel for that arch and ADSP_LIBRARY_PATH; a test
context (a small binary: --binary, else one compiled here with onnxruntime-qnn) and whether DSP heap
profiling is offered; the PD budget (learned, or found now with --probe-pd, which fills the PD with
small contexts until QNN error 1002 and frees them); ONNX Runtime for CPU segments.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qnnrt._capi.types import LOG_LEVEL_NAMES

MIN_PYTHON = (3, 11)


@dataclass
class Check:
    name: str
    status: str              # "ok" | "warn" | "fail" | "info" | "skip"
    detail: str
    fix: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, status: str, detail: str, fix: str = "") -> Check:
        c = Check(name, status, detail, fix)
        self.checks.append(c)
        return c

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict:
        return {"ok": self.ok, **self.data, "checks": [asdict(c) for c in self.checks],
                "problems": [asdict(c) for c in self.checks if c.status == "fail"]}


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine's QNN set-up and say what to fix")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--backend-lib", help="path to the QNN HTP backend library (default: discovered)")
    p.add_argument("--soc", help="SoC model number or name for the device config (e.g. SM8550)")
    p.add_argument("--binary", help="a small context binary for the test context and --probe-pd "
                   "(default: one compiled here with onnxruntime-qnn, where it is installed)")
    p.add_argument("--probe-pd", action="store_true",
                   help="find the PD capacity: create small contexts until QNN error 1002, free "
                        "them, and remember the capacity for this backend")
    p.add_argument("--log-level", default="warn", choices=LOG_LEVEL_NAMES)
    p.set_defaults(func=run)


# ---- the steps -------------------------------------------------------------------------------

def _platform(r: Report) -> None:
    from qnnrt import __version__
    from qnnrt._capi import libc, platforms
    h = platforms.detect_host()
    py = platform.python_version()
    r.data["platform"] = {"os": h.os, "machine": h.machine, "native_machine": h.native_machine,
                          "python": py, "python_executable": sys.executable,
                          "log_formatter": libc.FORMATTER.name if libc.FORMATTER else None}
    r.data["qnnrt"] = {"version": __version__, "path": str(Path(__file__).resolve().parents[1])}
    hw = f" (hardware {h.native_machine})" if h.native_machine != h.machine else ""
    if sys.version_info[:2] < MIN_PYTHON:
        r.add("python", "fail", f"Python {py}", f"use Python >= {'.'.join(map(str, MIN_PYTHON))} "
              f"(onnxruntime and onnxruntime-qnn ship no wheels for older ones)")
    r.add("platform", "ok", f"{h.os} {h.machine}{hw}, Python {py}, qnnrt {__version__}")
    if not platforms.sdk_targets(h, h.env.get("QNN_SDK_ROOT")):
        r.add("platform", "warn", f"no QNN SDK target is known for {h.os} {h.machine}",
              "QNN runs on Linux x86_64 (simulator), Linux/Android aarch64 and Windows x64/ARM64")
    if libc.FORMATTER is None:
        r.add("log formatter", "warn", "no vsnprintf in this C runtime: QNN log messages are shown "
              "unformatted")


def _libraries(r: Report, explicit: str | None) -> Path | None:
    """The backend library's path, or None (the problem recorded)."""
    from qnnrt._capi import platforms
    h = platforms.detect_host()
    backend, system = platforms.library_names(h)
    pkg = platforms.find_ort_qnn_package()
    order = ([{"why": "explicit path (--backend-lib)", "path": str(explicit)}] if explicit else
             [{"why": w, "path": str(p)} for w, p in platforms.candidate_dirs(h, pkg)])
    r.data["search_order"] = order
    r.data["environment"] = {k: h.env.get(k) for k in ("QNN_SDK_ROOT", "ADSP_LIBRARY_PATH")}
    libs: dict[str, Any] = {}
    r.data["libraries"] = libs
    found = platforms.find_library(h, backend, explicit, pkg)
    libs[backend] = {"path": str(found.path.resolve()) if found.path else None, "why": found.why,
                     "looked": found.looked}
    if found.path is None:
        msg = platforms.not_found_message(h, backend, found)
        head, _, todo = msg.partition("\nWhat to do: ")
        if not todo:
            head, _, todo = msg.partition(" What to do: ")
        r.add(backend, "fail", head, todo)
        if not h.env.get("QNN_SDK_ROOT"):
            r.add("QNN_SDK_ROOT", "info", "QNN_SDK_ROOT is not set")
        return None
    bpath = found.path.resolve()
    r.add(backend, "ok", f"{bpath} ({found.why})")
    root = h.env.get("QNN_SDK_ROOT")
    if root and not explicit and not found.why.startswith("QNN_SDK_ROOT"):
        sdk = [x for x in found.looked if "(QNN_SDK_ROOT" in x]
        exists = "" if Path(root).is_dir() else " (the folder does not exist)"
        r.add("QNN_SDK_ROOT", "fail", f"QNN_SDK_ROOT={root}{exists} has no {backend} for this machine, so "
              f"the {found.why}'s libraries are used instead. Looked in:\n" + "\n".join(sdk or [root]),
              f"point QNN_SDK_ROOT at a QNN SDK root (the folder holding lib/<target>/{backend}), or unset it")
    sfound = platforms.find_library(h, system, bpath.parent, pkg)
    libs[system] = {"path": str(sfound.path.resolve()) if sfound.path else None,
                    "why": "beside the backend library", "looked": sfound.looked}
    if sfound.path is None:
        r.add(system, "fail", f"{system} is not beside {bpath}",
              f"put {system} from the same QNN SDK or onnxruntime-qnn next to {backend}")
        return None
    r.add(system, "ok", f"{sfound.path.resolve()} (beside the backend library)")
    return bpath


def _open(r: Report, bpath: Path):
    from qnnrt._capi.library import open_library
    from qnnrt.core.device_info import api_info
    from qnnrt.errors import QnnrtError
    try:
        lib = open_library(bpath)
    except QnnrtError as e:
        r.add("load", "fail", str(e), "use the QNN libraries of one QNN SDK 2.x (core API 2, HTP API 5, "
              "system API 1), built for this machine")
        return None
    a = api_info(lib)
    r.data["api"] = a.to_dict()
    r.add("QNN API", "ok", f"{a.provider}: core {a.core_api}, HTP {a.htp_api}, system {a.system_api}, "
          f"build {a.build_id or 'unknown'}")
    return lib


def _backend(r: Report, bpath: Path, soc: str | None, log_level: str):
    from qnnrt.core.backend import Backend
    from qnnrt.errors import QnnrtError
    try:
        be = Backend(str(bpath), soc=soc, log_level=log_level)
    except QnnrtError as e:
        fix = getattr(e, "remedy", "") or ("check that the HTP is reachable (on devices: the DSP "
                                            "driver, /dev/fastrpc-*, the skel for the SoC's arch)")
        r.add("backend + device", "fail", str(e).splitlines()[0], fix)
        return None
    r.data["backend"] = {"created": True, "soc_config": be.soc_model}
    r.add("backend + device", "ok", "backend and device created" +
          (f" (SoC config {soc})" if soc else ""))
    return be


def _device(r: Report, lib, bpath: Path) -> Any:
    from qnnrt._capi import platforms
    from qnnrt.core.device_info import platform_info
    from qnnrt.errors import QnnrtError
    h = platforms.detect_host()
    device_backend = platforms.is_device_backend(h, bpath)
    r.data["device_backend"] = device_backend
    try:
        devs = platform_info(lib)
    except QnnrtError as e:
        r.data["devices"] = []
        r.add("device info", "warn", str(e))
        return None
    r.data["devices"] = [d.to_dict() for d in devs]
    if not devs:
        r.add("device info", "warn", "the backend reports no hardware device")
        return None
    d = devs[0]
    what = "x86 HTP simulator" if not device_backend else "device"
    note = ""
    if not device_backend:
        from qnnrt import soc as socs
        arch = socs.htp_arch_of(socs.parse_soc(socs.DEFAULT))
        note = (f"; that is the simulator's own default platform: it runs binaries built for any arch, and "
                f"qnnrt compiles for {socs.DEFAULT} / HTP v{arch} unless --soc says otherwise")
    r.add("device info", "ok", f"{what}: SoC {d.soc_name or '?'} (model {d.soc_model}), HTP v{d.htp_arch}, "
          f"VTCM {d.vtcm_mb} MB{note}")
    if device_backend and d.htp_arch:
        c = platforms.check_skel(h, d.htp_arch, bpath.parent)
        r.data["skel"] = {"arch": d.htp_arch, "path": str(c.path) if c.path else None, "looked": c.looked}
        if c.ok:
            r.add("HTP skel", "ok", c.message(h))
        else:
            msg = c.message(h)
            head, _, todo = msg.partition("What to do: ")
            r.add("HTP skel", "fail", head.strip(), todo)
        adsp = os.environ.get("ADSP_LIBRARY_PATH")
        r.data["environment"]["ADSP_LIBRARY_PATH"] = adsp
        r.add("ADSP_LIBRARY_PATH", "ok" if adsp else "warn", adsp or "not set (and no skel folder to set "
              "it to)", "" if adsp else "set ADSP_LIBRARY_PATH to the folder of the HTP skel")
    return d


def _test_binary(r: Report, given: str | None, soc: str | None, dev) -> tuple[Any, str]:
    """A small ContextBinary for the test context, and where it came from; (None, why not)."""
    from qnnrt.core.binary import ContextBinary
    if given:
        return ContextBinary(given), f"--binary {given}"
    try:
        import onnxruntime_qnn  # noqa: F401 - only to know whether we can compile one here
    except ImportError:
        return None, "no --binary given and onnxruntime-qnn (to compile one) is not installed"
    import onnx
    from onnx import TensorProto, helper

    from qnnrt import soc as socs
    from qnnrt.compiler.compile import CompileCache, compile_unit, resolve_soc
    from qnnrt.fileio import default_cache_dir
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    b = helper.make_tensor("b", TensorProto.FLOAT, [1, 64], [0.5] * 64)
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                          "doctor", [x], [y], [b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    target = soc or (dev.soc_name if dev is not None and r.data.get("device_backend") else None) or socs.DEFAULT
    with tempfile.TemporaryDirectory(prefix="qnnrt-doctor-") as work:
        unit = compile_unit([model], ["doctor"], resolve_soc(target), CompileCache(default_cache_dir()),
                            Path(work))
    return ContextBinary(unit.bin_path), f"compiled here for {target} (cached in {default_cache_dir()})"


def _contexts(r: Report, be, args, dev) -> None:
    from qnnrt.core.device_info import dsp_heap_profiling_offered
    from qnnrt.errors import QnnrtError
    from qnnrt.runtime.residency import budget as pd_budget
    identity = pd_budget.backend_identity(be.lib, be.soc_model)
    r.data["pd_identity"] = identity
    binary = None
    try:
        binary, source = _test_binary(r, args.binary, args.soc, dev)
    except (QnnrtError, OSError, ValueError) as e:
        source = f"could not make a test binary: {e}"
    r.data["test_binary"] = {"source": source, "path": str(binary.path) if binary is not None else None}
    if binary is None:
        r.add("test context", "skip", source, "pass --binary path/to/small.bin to check context creation")
        r.data["dsp_heap_profiling"] = None
    else:
        try:
            offered = dsp_heap_profiling_offered(be, binary)
        except QnnrtError as e:
            r.add("test context", "fail", f"creating a context from {binary.where} failed: "
                  f"{str(e).splitlines()[0]}", getattr(e, "remedy", "") or
                  "check that the binary was compiled for this SoC / HTP arch and this QNN version")
            binary.close()
            binary = None
        else:
            r.data["dsp_heap_profiling"] = offered
            r.add("test context", "ok", f"context created and freed ({source})")
            r.add("DSP heap profiling", "ok" if offered else "info",
                  "offered (HTP context option 4): profile_heap reports DSP heap values" if offered else
                  "not offered by this backend (QNN error 1000 for HTP context option 4; the x86 "
                  "simulator refuses it, devices offer it): host heap values are reported instead")
    _performance_features(r, be, binary)
    # PD budget
    pd: dict[str, Any] = {}
    r.data["pd_budget"] = pd
    if args.probe_pd:
        if binary is None:
            r.add("PD probe", "fail", "--probe-pd needs a test context binary", "pass --binary path/to/small.bin")
        else:
            try:
                p = pd_budget.probe_capacity(be, binary)
            except QnnrtError as e:
                r.add("PD probe", "fail", str(e).splitlines()[0])
            else:
                pd["probe"] = p.to_dict()
                if p.capacity_bytes is not None:
                    where = pd_budget.remember_budget(identity, p.capacity_bytes)
                    pd["remembered_in"] = where
                    r.add("PD probe", "ok", f"capacity {p.capacity_bytes:,} B: {p.contexts} contexts of "
                          f"{p.reservation_bytes:,} B + the space left, in {p.seconds:.2f} s; "
                          + (f"remembered in {where}" if where else "could not write the cache"))
                else:
                    r.add("PD probe", "warn", p.note)
    if binary is not None:
        binary.close()
    bud = pd_budget.resolve_budget(identity)
    pd.update({"bytes": bud.bytes if bud else None, "source": bud.source if bud else None,
               "identity": identity})
    r.add("PD budget", "ok" if bud else "info", bud.describe() if bud else
          "unknown for this backend: learned the first time a run fills the PD, or now with --probe-pd")


def _onnxruntime(r: Report) -> None:
    try:
        import onnxruntime as ort
        providers = list(ort.get_available_providers())
    except Exception as e:  # noqa: BLE001 - a broken install must be reported, not crash doctor
        r.data["onnxruntime"] = {"available": False, "error": str(e)}
        r.add("ONNX Runtime", "fail", f"cannot import onnxruntime ({e}): programs with CPU segments "
              f"cannot run", "pip install 'onnxruntime>=1.24.2'")
        return
    cpu = "CPUExecutionProvider" in providers
    r.data["onnxruntime"] = {"available": cpu, "version": ort.__version__, "providers": providers}
    if cpu:
        r.add("ONNX Runtime", "ok", f"{ort.__version__}: CPUExecutionProvider for CPU segments")
    else:
        r.add("ONNX Runtime", "fail", f"onnxruntime {ort.__version__} has no CPUExecutionProvider",
              "pip install --force-reinstall 'onnxruntime>=1.24.2'")


def _performance_features(r: Report, be, binary) -> None:
    """Performance votes, shared buffers, spill-fill groups: offered by this backend or not (tried)."""
    from qnnrt.core.device_info import performance_features_offered
    from qnnrt.errors import QnnrtError
    try:
        feats = performance_features_offered(be, binary)
    except QnnrtError as e:
        r.add("performance features", "warn", f"could not be tried: {str(e).splitlines()[0]}")
        return
    r.data["performance_features"] = feats
    for name, f in feats.items():
        status = "ok" if f["offered"] else "skip" if f["offered"] is None else "info"
        said = "offered" if f["offered"] else "not tried" if f["offered"] is None else "not offered"
        r.add(name, status, f"{said}: {f['detail']}")


def diagnose(args) -> Report:
    r = Report()
    _platform(r)
    bpath = _libraries(r, args.backend_lib)
    lib = _open(r, bpath) if bpath is not None else None
    be = _backend(r, bpath, args.soc, args.log_level) if lib is not None and bpath is not None else None
    if lib is not None and bpath is not None:
        dev = _device(r, lib, bpath)
        if be is not None:
            try:
                _contexts(r, be, args, dev)
            finally:
                be.close()
    if lib is None:
        r.add("QNN checks", "skip", "API versions, device, test context and PD budget need the QNN libraries")
    _onnxruntime(r)
    return r


_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "info": "info", "skip": "skip"}


def render(r: Report) -> str:
    width = max(len(c.name) for c in r.checks)
    out = ["qnnrt doctor"]
    for c in r.checks:
        lines = c.detail.splitlines() or [""]
        out.append(f"  {_MARK[c.status]:<4}  {c.name:<{width}}  {lines[0]}")
        out += [f"        {'':<{width}}  {x}" for x in lines[1:]]
        if c.fix:
            out.append(f"        {'':<{width}}  what to do: {c.fix}")
    if r.data.get("search_order"):
        out.append("search order: " + "; ".join(f"{i + 1}. {s['path']} ({s['why']})"
                                                for i, s in enumerate(r.data["search_order"])))
    problems = [c for c in r.checks if c.status == "fail"]
    out.append("runs would work" if not problems else
               f"{len(problems)} problem(s): " + ", ".join(c.name for c in problems))
    return "\n".join(out)


def run(args) -> int:
    r = diagnose(args)
    if args.json:
        print(json.dumps(r.to_json(), indent=1))
    else:
        print(render(r))
    return 0 if r.ok else 1
