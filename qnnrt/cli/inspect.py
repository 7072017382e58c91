"""`qnnrt inspect PATH [--json]`: what is inside a context binary, program, EPContext model or .pte."""
from __future__ import annotations

import json
from pathlib import Path

from qnnrt._capi.types import LOG_LEVEL_NAMES
from qnnrt.errors import FormatError


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="show graphs, tensors and sizes of a binary or program")
    p.add_argument("path", help="context binary (.bin), program folder, EPContext .onnx, .pte or Genie "
                                "bundle folder (genie_config.json)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--backend-lib", help="path to libQnnHtp.so (default: discovered)")
    p.add_argument("--pd", action="store_true",
                   help="predicted PD need per context and whether / how the program fits")
    p.add_argument("--budget", help="PD budget for --pd (e.g. 3.4GiB; default: learned for this "
                   "backend, or the simulator's)")
    p.add_argument("--max-pds", type=int, default=None,
                   help="for --pd: the most PD worker processes the multi-PD placement may use "
                        "(default 4)")
    p.add_argument("--log-level", default="warn", choices=LOG_LEVEL_NAMES)
    p.set_defaults(func=run)


def _quant(t: dict) -> str:
    q = t.get("quantization")
    if not q:
        return "-"
    return f"{q['encoding']} scale={q['scale']:.6g} offset={q['offset']}"


def describe_binary(path: Path, backend_lib: str | None = None) -> dict:
    from qnnrt.core import ContextBinary
    with ContextBinary(path, backend_lib=backend_lib) as b:
        info = b.info.to_dict()
        info.update({"path": str(path), "kind": "context_binary", "file_size": b.size})
        return info


def describe(path: Path, backend_lib: str | None = None) -> dict:
    if not path.exists():
        raise FormatError(f"{path}: no such file or folder")
    from qnnrt.formats.genie import is_genie_bundle
    if is_genie_bundle(path):
        from qnnrt.cli.inspect_genie import describe_genie
        return describe_genie(path, backend_lib)
    if path.is_dir() or path.suffix == ".onnx":
        return _describe_program(path, backend_lib)
    if path.suffix == ".pte":
        from qnnrt.executorch.reader import read_pte
        from qnnrt.executorch.describe import describe_pte, qnn_graph_lister
        from qnnrt.executorch.compile_spec import runtime_options
        with read_pte(path) as prog:
            d = describe_pte(prog, qnn_graph_lister())
        d["kind"] = "pte"
        d["qnn_runtime_options"] = runtime_options(_compile_specs(d))
        return d
    return describe_binary(path, backend_lib)


def _describe_program(path: Path, backend_lib: str | None) -> dict:
    from qnnrt.cli.inspect_program import describe_program
    return describe_program(path, backend_lib)


def _print_binary(d: dict) -> None:
    print(f"{d['path']}: QNN context binary, {d['file_size']} bytes")
    print(f"  build {d['build_id']}, core API {d['core_api']}, backend API {d['backend_api']}, "
          f"SoC model {d['soc_model'] if d['soc_model'] is not None else '?'}"
          + (f" ({d['soc_version']})" if d["soc_version"] else ""))
    print(f"  context blob {d['context_blob_size']} bytes, {len(d['graphs'])} graph(s)")
    print(f"  HTP weight sharing: {_weight_sharing(d['graphs'])}")
    for g in d["graphs"]:
        print(f"\n  graph {g['name']}")
        rows = [("", "name", "dtype", "shape", "quantization")]
        for kind in ("inputs", "outputs"):
            for t in g[kind]:
                rows.append((kind[:-1], t["name"], t["dtype"], "x".join(map(str, t["shape"])),
                             _quant(t)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            print("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _weight_sharing(graphs: list[dict]) -> str:
    """'yes (...)' / 'no' / 'unknown' from the graphs' blob info (sharedWeightsSize)."""
    infos = [g.get("blob_info") or {} for g in graphs]
    if not any("sharedWeightsSize" in i for i in infos):
        return "unknown (no HTP graph blob info v2)"
    shared = [f"{g['name']} {i['sharedWeightsSize']} bytes" for g, i in zip(graphs, infos)
              if i.get("sharedWeightsSize")]
    return f"yes ({', '.join(shared)}); the x86 simulator cannot run it" if shared else "no"


def run(args) -> int:
    if args.pd or args.budget:
        from qnnrt.cli.inspect_pd import describe_pd, print_pd
        d = describe_pd(Path(args.path), args.backend_lib, args.budget, args.max_pds)
        if args.json:
            print(json.dumps(d, indent=2))
        else:
            print_pd(d)
        return 0
    d = describe(Path(args.path), args.backend_lib)
    if args.json:
        print(json.dumps(d, indent=2))
    elif d.get("kind") == "context_binary":
        _print_binary(d)
    elif d.get("kind") == "program":
        from qnnrt.cli.inspect_program import print_program
        print_program(d)
    elif d.get("kind") == "genie":
        from qnnrt.cli.inspect_genie import print_genie
        print_genie(d)
    else:
        _print_pte(d)
    return 0


def _shape(t: dict) -> str:
    return f"{t.get('dtype')}[{'x'.join(map(str, t.get('shape') or []))}]"


def _compile_specs(d: dict) -> list[dict]:
    """The distinct QNN compile specs of a described .pte's delegates."""
    out: list[dict] = []
    for m in d["methods"]:
        for e in m["delegates"]:
            spec = e.get("compile_spec")
            if spec and spec not in out:
                out.append(spec)
    return out


def _yes(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "''" if v == "" else str(v)


def _print_compile_specs(d: dict) -> None:
    """What each distinct compile spec asks of the runtime, then the rest of its fields."""
    from qnnrt.executorch.compile_spec import RUNTIME_FIELDS
    specs = _compile_specs(d)
    for i, spec in enumerate(specs):
        head = "QNN compile spec" + (f" {i + 1} of {len(specs)}" if len(specs) > 1 else
                                     " (the same for every delegate)")
        print(f"\n  {head}, ExecuTorch field layout {spec.get('layout', '?')}:")
        print(f"    target: SoC {spec.get('soc_model', '?')}, HTP v{spec.get('htp_arch', '?')}, VTCM "
              f"{spec.get('vtcm_mb', '?')} MB, backend {spec.get('backend', '?')}, precision "
              f"{spec.get('precision', '?')}")
        print("    runtime: " + ", ".join(f"{k} {_yes(spec[k])}" for k in RUNTIME_FIELDS if k in spec))
        rest = [k for k in spec if k not in RUNTIME_FIELDS and k not in
                ("layout", "soc_model", "htp_arch", "vtcm_mb", "backend", "precision")]
        if rest:
            print("    other: " + ", ".join(f"{k} {_yes(spec[k])}" for k in rest))


def _print_pte(d: dict) -> None:
    print(f"{d['path']}: ExecuTorch program, {d['file_size']} bytes, {len(d['methods'])} method(s), "
          f"{len(d['contexts'])} QNN context binar{'y' if len(d['contexts']) == 1 else 'ies'}")
    consts = [m for m in d["methods"] if "constant" in m]
    if consts:
        print(f"\n  constant methods ({len(consts)}):")
        for m in consts:
            print(f"    {m['name']} = {m['constant']!r}")
    for m in d["methods"]:
        if "constant" in m:
            continue
        ins = ", ".join(f"{t['name']} {_shape(t)}" for t in m["inputs"])
        outs = ", ".join(f"{t['name']} {_shape(t)}" for t in m["outputs"])
        n = m["instructions"]
        print(f"\n  method {m['name']}: ({ins}) -> ({outs})")
        print(f"    {n['total']} instructions: {n['delegate_calls']} delegate call(s), "
              f"{n['kernel_calls']} CPU kernel call(s)")
        if m["cpu_operators"]:
            ops = [f"{o['name']} x{o['calls']}" + ("" if o.get("implemented", True)
                                                  else " (NOT IMPLEMENTED)")
                   for o in m["cpu_operators"]]
            print(f"    CPU operators: {', '.join(ops)}")
    _print_compile_specs(d)
    print("\n  context binaries:")
    for c in d["contexts"]:
        graphs = ", ".join(g["name"] for g in c.get("graphs", []))
        print(f"    {c['key']}: {c['context_binary_size']} bytes, graphs [{graphs}], used by "
              f"{', '.join(c['used_by'])}")
        if c.get("graphs"):
            print(f"      HTP weight sharing: {_weight_sharing(c['graphs'])}")
    if d.get("missing_operators"):
        print(f"\n  missing CPU operators (qnnrt cannot run these): {d['missing_operators']}")
    if d.get("non_qnn_delegates"):
        print(f"\n  delegates of other backends: {d['non_qnn_delegates']}")
