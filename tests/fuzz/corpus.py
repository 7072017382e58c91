"""Tiny seed inputs for the fuzzer, one per reader, made with the real toolchain (cached):

bin      a raw context binary (relu(x + b) * w on [1, 64], ORT's QNN EP)
epc0     an EPContext model ORT wrote, embed mode 0 (model + .bin next to it)
epc1     the same with the binary embedded in the model (embed mode 1)
program  a qnnrt program folder (`qnnrt build` of the same model: program.json with sha256)
pte      tests/data/executorch/add_relu_mul_fp16/model.pte (ExecuTorch's QNN delegate)

`make_cases` turns the seeds into mutated inputs on disk."""
from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx

from tests.helpers.data import executorch_pte
from tests.fuzz import mutate as M

READERS = ("bin", "epc0", "epc1", "program", "pte")
PTE_SEED = executorch_pte("add_relu_mul_fp16")


@dataclass
class Case:
    reader: str
    index: int
    path: str         # what qnnrt.load is given
    mutation: str


def make_seeds(work: Path) -> dict[str, Path]:
    """Build (or reuse) the seeds under `work/seeds`."""
    from qnnrt.compiler.builder import BuildOptions, build_program
    from qnnrt.compiler.compile import qnn_session, resolve_soc
    from tests.helpers.qnn_fixtures import add_relu_mul, compile_models
    seeds = work / "seeds"
    done = seeds / "done"
    out = {"bin": seeds / "bin" / "model.bin", "epc0": seeds / "epc0" / "model_ctx.onnx",
           "epc1": seeds / "epc1" / "model_ctx.onnx", "program": seeds / "program",
           "pte": seeds / "pte" / "model.pte"}
    if done.exists():
        return out
    shutil.rmtree(seeds, ignore_errors=True)
    for d in ("bin", "epc0", "epc1", "pte", "build"):
        (seeds / d).mkdir(parents=True)
    built = compile_models([add_relu_mul()], ["add_relu_mul"], seeds / "build")
    shutil.copyfile(built.path, out["bin"])
    for mode in (0, 1):
        d = seeds / f"epc{mode}"
        onnx.save(add_relu_mul(), d / "model.onnx")
        qnn_session(d / "model.onnx", resolve_soc("SM8550"),
                    {"ep.context_enable": "1", "ep.context_embed_mode": str(mode),
                     "ep.context_file_path": str(d / "model_ctx.onnx")})
        (d / "model.onnx").unlink()
    build_program([("forward", add_relu_mul())], out["program"], BuildOptions(progress=False,
                                                                             write_reference=False))
    shutil.copyfile(PTE_SEED, out["pte"])
    shutil.rmtree(seeds / "build", ignore_errors=True)
    done.write_text("ok\n")
    return out


def _write(path: Path, data: bytes | str) -> None:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    path.write_bytes(data)


def _epc_structural(model_path: Path, rng: random.Random) -> str:
    """Damage an EPContext model through onnx: no outputs, odd attributes, bad names."""
    m = onnx.load(str(model_path))
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    kind = rng.choice(("no_outputs", "cache_path", "embed_mode", "bad_name", "missing_tensor",
                       "partition"))
    attrs = {a.name: a for a in node.attribute}
    try:
        _edit(node, attrs, kind, rng)
        onnx.save(m, str(model_path))
    except (ValueError, UnicodeError):  # protobuf refuses some strings: write raw bytes instead
        model_path.write_bytes(M.bit_flips(model_path.read_bytes(), rng))
        return "epc_raw"
    return "epc_" + kind


def _edit(node, attrs, kind: str, rng: random.Random) -> None:
    if kind == "no_outputs":
        del node.output[:]
    elif kind == "cache_path" and "ep_cache_context" in attrs:
        attrs["ep_cache_context"].s = rng.choice((b"../x.bin", b"/etc/hostname", b"a\x00b.bin",
                                                  b"\xff\xfe.bin", b"", b".", b"/dev/zero",
                                                  b"../" * 40 + b"etc/passwd"))
    elif kind == "embed_mode" and "embed_mode" in attrs:
        attrs["embed_mode"].i = rng.choice((2, -1, 1 << 40, 1 - int(attrs["embed_mode"].i)))
    elif kind == "bad_name":
        target = rng.choice(("node", "input", "output"))
        bad = rng.choice(("a\x00b", "\udcff"))
        if target == "node":
            node.name = bad
        elif target == "input":
            node.input[0] = bad
        else:
            node.output[0] = bad
    elif kind == "missing_tensor":
        node.input[0] = "not_a_tensor"
    elif "partition_name" in attrs:
        attrs["partition_name"].s = rng.choice((b"no_such_graph", b"", b"\xff"))


def make_case(reader: str, index: int, seed: int, seeds: dict[str, Path], root: Path) -> Case:
    rng = M.case_rng(reader, seed, index)
    d = root / f"{reader}_{index:05d}"
    d.mkdir(parents=True)
    if reader in ("bin", "pte"):
        src = seeds[reader]
        data, how = M.mutate_bytes(src.read_bytes(), rng)
        p = d / src.name
        _write(p, data)
        return Case(reader, index, str(p), how)
    if reader in ("epc0", "epc1"):
        src_dir = seeds[reader].parent
        for f in src_dir.iterdir():
            shutil.copyfile(f, d / f.name)
        model = d / seeds[reader].name
        r = rng.random()
        if r < 0.35:
            how = _epc_structural(model, rng)
        elif reader == "epc0" and r < 0.75:
            bins = sorted(d.glob("*.bin"))
            if rng.random() < 0.15:
                how = M.link_tricks(d, bins[0].name, rng)
            else:
                data, how = M.mutate_bytes(bins[0].read_bytes(), rng)
                _write(bins[0], data)
                how = "bin_" + how
        else:
            data, how = M.mutate_bytes(model.read_bytes(), rng)
            _write(model, data)
            how = "onnx_" + how
        return Case(reader, index, str(model), how)
    # program folder
    prog = M.copy_tree(seeds["program"], d / "prog")
    r = rng.random()
    manifest = prog / "program.json"
    if r < 0.5:
        data, how = M.mutate_json(manifest.read_text(), rng)
        _write(manifest, data)
        how = "json_" + how
    elif r < 0.6:
        ctx = sorted((prog / "contexts").glob("*.bin"))[0]
        how = M.link_tricks(prog, f"contexts/{ctx.name}", rng)
    elif r < 0.65:
        shutil.rmtree(prog / "contexts")
        M.link_tricks(prog, "contexts", rng)
        how = "link_contexts_dir"
    elif r < 0.85:
        model = prog / "forward.onnx"
        if rng.random() < 0.5:
            how = _epc_structural(model, rng)
        else:
            data, how = M.mutate_bytes(model.read_bytes(), rng)
            _write(model, data)
            how = "onnx_" + how
    else:
        ctx = sorted((prog / "contexts").glob("*.bin"))[0]
        data, how = M.mutate_bytes(ctx.read_bytes(), rng)
        _write(ctx, data)
        how = "bin_" + how
    return Case(reader, index, str(prog), how)


def make_cases(readers: list[str], per_reader: int, seed: int, seeds: dict[str, Path],
               root: Path) -> list[Case]:
    return [make_case(r, i, seed, seeds, root) for r in readers for i in range(per_reader)]
