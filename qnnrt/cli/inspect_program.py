"""`qnnrt inspect FOLDER` (a program folder, or an EPContext .onnx): its methods, the SoC and HTP arch
of every binary, and each graph's I/O (name, dtype, shape, quantization) as for a single .bin, with
the graphs of the same signature folded into one entry and a count, so a program of 66 or 402
context binaries stays readable. `--json` has all of it, each binary too."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qnnrt import soc as socs

SHOWN_FILES = 3    # files named per folded group in the text output (the JSON names them all)


def _arch(model: int | None) -> tuple[str | None, int | None]:
    """(SoC name, HTP arch) of a SoC model number, from the one SoC table (None where unknown)."""
    s = socs.by_model(model) if model else None
    return (s.name, s.htp_arch) if s else (None, None)


def signature(graph: dict[str, Any]) -> str:
    """What makes two graphs the same to a caller: the dtype, shape and quantization of each input
    and output, in order (tensor names aside: a partitioner names them after the layer)."""
    return json.dumps([[(t["dtype"], t["shape"], t["quantization"]) for t in graph[kind]]
                       for kind in ("inputs", "outputs")])


def describe_program(path: Path, backend_lib: str | None = None) -> dict[str, Any]:
    from qnnrt.core import ContextBinary
    from qnnrt.formats.epcontext import read_epcontext_model
    target: dict[str, Any] = {}
    if path.is_dir():
        from qnnrt.formats.program import read_program
        manifest = read_program(path)
        models = {m.name: path / m.model for m in manifest.methods}
        root, target = path, dict(manifest.target)
    else:
        models, root = {path.stem: path}, path.parent
    out: dict[str, Any] = {"path": str(path), "kind": "program", "target": target, "methods": [],
                           "contexts": {}}
    for name, mp in models.items():
        em = read_epcontext_model(mp, root=root)
        cpu_ops: dict[str, int] = {}
        for n in em.graph.node:
            if n.op_type != "EPContext":
                cpu_ops[n.op_type] = cpu_ops.get(n.op_type, 0) + 1
        out["methods"].append({
            "name": name, "model": str(mp),
            "inputs": [i.name for i in em.graph.input],
            "outputs": [o.name for o in em.graph.output],
            "graph_calls": [{"node": n.name, "graph": n.graph_name,
                             "binary": str(n.binary_path.relative_to(root.resolve()))
                             if n.binary_path else "embedded"} for n in em.epcontext_nodes],
            "cpu_ops": cpu_ops})
        for n in em.epcontext_nodes:
            key = str(n.binary_path.relative_to(root.resolve())) if n.binary_path else None
            if key is None or key in out["contexts"]:
                continue
            with ContextBinary(n.binary_path, backend_lib=backend_lib) as b:
                info, size = b.info.to_dict(), b.size
            name_, arch = _arch(info["soc_model"])
            out["contexts"][key] = {
                "size": size, "soc_model": info["soc_model"], "soc": name_, "htp_arch": arch,
                "soc_version": info["soc_version"], "build_id": info["build_id"],
                "weight_sharing": info["weight_sharing"],
                "graphs": [g["name"] for g in info["graphs"]],
                "graph_io": [{k: g[k] for k in ("name", "inputs", "outputs")} for g in info["graphs"]]}
    out["socs"] = _socs(out["contexts"])
    out["graph_groups"] = _groups(out["contexts"])
    return out


def _socs(contexts: dict[str, Any]) -> list[dict[str, Any]]:
    """The binaries per (SoC, arch, QNN build): usually one line for a whole program."""
    groups: dict[tuple, list[str]] = {}
    for key, c in contexts.items():
        groups.setdefault((c["soc_model"], c["soc"], c["htp_arch"], c["build_id"]), []).append(key)
    return [{"soc_model": m, "soc": n, "htp_arch": a, "build_id": b, "contexts": len(keys),
             "first": keys[0], "last": keys[-1]} for (m, n, a, b), keys in groups.items()]


def _groups(contexts: dict[str, Any]) -> list[dict[str, Any]]:
    """Graphs of the same signature, in first-seen order: each with its count, every (context,
    graph) holding it, its I/O as the first one has it, and whether the tensor names agree."""
    groups: dict[str, dict[str, Any]] = {}
    for key, c in contexts.items():
        for g in c["graph_io"]:
            sig = signature(g)
            grp = groups.get(sig)
            if grp is None:
                grp = groups[sig] = {"count": 0, "members": [], "inputs": g["inputs"],
                                     "outputs": g["outputs"], "tensor_names_agree": True}
            grp["count"] += 1
            grp["members"].append({"context": key, "graph": g["name"]})
            names = [t["name"] for kind in ("inputs", "outputs") for t in g[kind]]
            if names != [t["name"] for kind in ("inputs", "outputs") for t in grp[kind]]:
                grp["tensor_names_agree"] = False
    return list(groups.values())


def _quant(t: dict) -> str:
    q = t.get("quantization")
    if not q:
        return "-"
    return f"{q['encoding']} scale={q['scale']:.6g} offset={q['offset']}"


def _files(members: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(m["context"] for m in members))
    shown = ", ".join(keys[:SHOWN_FILES])
    return shown + (f" and {len(keys) - SHOWN_FILES} more" if len(keys) > SHOWN_FILES else "")


def print_program(d: dict[str, Any]) -> None:
    contexts = d["contexts"]
    print(f"{d['path']}: program, {len(d['methods'])} method(s), {len(contexts)} context "
          f"binaries ({sum(c['size'] for c in contexts.values())} bytes)")
    t = d.get("target") or {}
    if t:
        print("  target (program.json): " + ", ".join(f"{k} {v}" for k, v in t.items()))
    for m in d["methods"]:
        print(f"\n  method {m['name']}: inputs {m['inputs']} -> outputs {m['outputs']}")
        print(f"    {len(m['graph_calls'])} QNN graph call(s); CPU ops: "
              + (", ".join(f"{k} x{v}" for k, v in sorted(m["cpu_ops"].items())) or "none"))
    print()
    for s in d["socs"]:
        which = ("every binary" if s["contexts"] == len(contexts)
                 else f"{s['contexts']} binaries ({s['first']} .. {s['last']})")
        soc = (f"SoC {s['soc']} (model {s['soc_model']}), HTP v{s['htp_arch']}" if s["soc"] else
               f"SoC model {s['soc_model'] if s['soc_model'] else '? (not recorded)'}")
        print(f"  {soc}, QNN build {s['build_id']}: {which}")
    sharing = [k for k, c in contexts.items() if c["weight_sharing"]]
    if sharing:
        print(f"  HTP weight sharing in {len(sharing)} binaries ({sharing[0]}, ...): the x86 simulator cannot run them")
    groups = d["graph_groups"]
    total = sum(g["count"] for g in groups)
    print(f"\n  {total} graph(s), {len(groups)} distinct signature(s) (same I/O dtypes, shapes, "
          f"quantization: folded):")
    for g in groups:
        first = g["members"][0]
        print(f"\n  {g['count']} x graph like {first['graph']} of {first['context']}"
              + (f"\n    in {_files(g['members'])}" if g["count"] > 1 else ""))
        if not g["tensor_names_agree"]:
            print("    (tensor names differ between them; the first one's shown)")
        rows = [("", "name", "dtype", "shape", "quantization")]
        for kind in ("inputs", "outputs"):
            for tt in g[kind]:
                rows.append((kind[:-1], tt["name"], tt["dtype"], "x".join(map(str, tt["shape"])), _quant(tt)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            print("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
