"""The shape the tree promises: layers import only downwards, one SoC table serves every layer, the
program path validates a graph's inputs once, a broken subcommand is an error."""
from __future__ import annotations

import ast
from pathlib import Path

import flatbuffers
import numpy as np
import pytest

import qnnrt
from qnnrt import soc
from qnnrt.errors import BuildError, QnnrtError
from tests.helpers.cli_helpers import qnnrt as qnnrt_cli

ROOT = Path(qnnrt.__file__).parent
# a package may import itself and the ones listed after it (lower layers) only
LAYERS = {
    "_capi": set(),
    "core": {"_capi"},
    "formats": set(),
    "profiling": {"_capi", "core", "formats"},
    "runtime": {"core", "formats", "profiling"},
    "executorch": {"core", "formats", "runtime"},
    "compiler": {"core", "formats", "_capi"},
    "convert": {"compiler", "formats", "llm"},   # a model to a Genie bundle: compiles, reads RoPE from llm
    "llm": {"runtime", "formats"},      # drives a loaded Program; never loads one itself
    "serve": {"llm"},                   # HTTP in front of the LLM runner
    "cli": {"*"},
}
SHARED = {"errors", "soc", "units", "fileio", "progress", "spawn", "install"}  # beneath every layer
# modules, not packages: loader.py chooses between runtime/ and executorch/, below the CLI only
# and the shared modules import only each other
MODULES = {"loader": {"core", "formats", "profiling", "runtime", "executorch"},
           **{name: set() for name in SHARED}}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qnnrt."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("qnnrt."))
    return out


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_only_downwards(layer):
    allowed = LAYERS[layer] | SHARED | {layer}
    bad = {}
    for f in (ROOT / layer).rglob("*.py"):
        wrong = _imports(f) - allowed
        if "*" not in allowed and wrong:
            bad[str(f.relative_to(ROOT))] = sorted(wrong)
    assert not bad, f"{layer}/ reaches up or sideways: {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_top_level_modules_import_only_downwards(module):
    wrong = _imports(ROOT / f"{module}.py") - MODULES[module] - SHARED - {module}
    assert not wrong, f"{module}.py reaches up or sideways: {sorted(wrong)}"


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS), f"packages without a rule in LAYERS: {sorted(packages - set(LAYERS))}"

def test_the_asgi_stack_is_imported_only_where_it_serves():
    """`qnnrt` works without the `serve` extra: only serve/app.py, serve/server.py and
    serve/connections.py import the ASGI stack, and nothing imports them at module level outside serve/."""
    stack = {"starlette", "uvicorn", "fastapi"}
    for f in ROOT.rglob("*.py"):
        tree = ast.parse(f.read_text())
        top = {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
               for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in (n.names if isinstance(n, ast.Import) else [n])}
        rel = str(f.relative_to(ROOT))
        asgi = ("serve/app.py", "serve/server.py", "serve/connections.py")
        if rel not in asgi:
            assert not top & stack, rel
            mods = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
            if not rel.startswith("serve/"):
                assert not mods & {"qnnrt." + m.removesuffix(".py").replace("/", ".") for m in asgi}, rel


def test_runtime_never_touches_ctypes():
    for f in (ROOT / "runtime").rglob("*.py"):
        text = f.read_text()
        assert "ctypes" not in text and "_capi" not in text, f


def _modules_imported(path: Path) -> set[str]:
    """Full module names `path` imports from qnnrt (at any place: lazy imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qnnrt."):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("qnnrt."))
    return out


def _module_name(f: Path) -> str:
    parts = f.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES_BY_NAME = {_module_name(f): f for f in ROOT.rglob("*.py")}


def _runtime_imports(f: Path) -> set[str]:
    """The qnnrt modules `f` imports when it runs (module level or inside a function; not under
    `if TYPE_CHECKING:`), each resolved to a module: `from qnnrt.x import y` is qnnrt.x.y when that
    is a module, else qnnrt.x."""
    tree = ast.parse(f.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qnnrt"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in MODULES_BY_NAME else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("qnnrt"))
    return {m for m in out if m in MODULES_BY_NAME} - {_module_name(f)}


IMPORTS = {name: _runtime_imports(f) for name, f in MODULES_BY_NAME.items()}


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_loop_beyond_types():
    """No module of qnnrt imports (at module level or lazily) one that imports it back: only an
    `if TYPE_CHECKING:` import may point up."""
    assert not _loops(IMPORTS), _loops(IMPORTS)


# runtime/ as wings, lowest first: a wing imports only itself and the wings before it (a type-only
# import aside). The plan and its steps, with what every wing shares (hooks, recovery, performance,
# teardown), are the modules at runtime/'s root; program.py, the door, opens hosts over them.
WINGS = ["ipc", "plan", "vet", "residency", "hosts", "program"]


def _wing(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["qnnrt", "runtime"] or len(parts) < 3:
        return None
    if parts[2] in ("ipc", "vet", "residency", "hosts", "program"):
        return parts[2]
    return "plan"


def test_runtime_reads_as_its_wings():
    assert {d.name for d in (ROOT / "runtime").iterdir() if (d / "__init__.py").exists()} == {
        "ipc", "vet", "residency", "hosts"}
    bad = {}
    for module, deps in IMPORTS.items():
        wing = _wing(module)
        if wing is None:
            continue
        above = {d for d in deps if (_wing(d) or wing) in WINGS[WINGS.index(wing) + 1:]}
        if above:
            bad[module] = sorted(above)
    assert not bad, f"a wing reaches up (order {WINGS}): {bad}"
    assert "qnnrt.runtime.ipc.child" in IMPORTS["qnnrt.runtime.hosts.pd.handle"]   # the scan sees them


# each module of the multi-PD host runs on one side of the process boundary
SIDES = {
    "runtime/hosts/pd": {"main": {"kind", "placement", "devices", "fleet", "handle", "remote", "segment"},
                         "worker": {"worker", "worker_segment"},
                         "shared": {"__init__", "protocol", "channel", "portable"}},
    "runtime/vet": {"main": {"policy", "watch"}, "child": {"child"}, "shared": {"__init__", "protocol"}},
}


def _reach(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for d in IMPORTS[todo.pop()] - seen:
            seen.add(d)
            todo.append(d)
    return seen


@pytest.mark.parametrize("folder", sorted(SIDES))
def test_no_module_runs_on_both_sides(folder):
    """A file of a host that spans processes is of one side, named in SIDES: a side's modules reach
    (through every import, lazy ones included) no module of the other side, and the shared ones
    (protocol, framing) reach neither; outside the folder nothing names a module of the far side
    but its own spawn command."""
    sides = SIDES[folder]
    package = "qnnrt." + folder.replace("/", ".")
    files = {f.stem for f in (ROOT / folder).glob("*.py")}
    assert files == set().union(*sides.values()), files ^ set().union(*sides.values())
    of = {f"{package}.{m}" if m != "__init__" else package: side
          for side, ms in sides.items() for m in ms}
    for module, side in of.items():
        crossing = {d for d in _reach(module) if of.get(d, side) not in (side, "shared")}
        assert not crossing, (module, side, crossing)
    far = {m for m, s in of.items() if s not in ("main", "shared")}
    outside = {n for n, deps in IMPORTS.items() if n not in of and deps & far}
    assert not outside, outside


@pytest.mark.parametrize("module", ["runtime/program.py", "runtime/plan.py", "runtime/steps.py",
                                    "runtime/plan_context.py", "runtime/method.py",
                                    "executorch/plan.py", "executorch/program.py",
                                    "runtime/segments.py", "runtime/hosts/this_process.py"])
def test_programs_and_plans_name_no_pd_module(module):
    """They ask hosts (runtime/hosts/): no module of the multi-PD host, not even the placement
    (the kind of host that uses a placement decides it)."""
    named = {m for m in _modules_imported(ROOT / module) if m.startswith("qnnrt.runtime.hosts.pd")}
    assert not named, (module, named)


def test_the_hosts_registry_names_no_multi_pd_module():
    """The registry sizes every kind by the PD budget (residency/budget.py) and knows the kinds by
    name only."""
    named = {m for m in _modules_imported(ROOT / "runtime/hosts/__init__.py")
             if m.startswith("qnnrt.runtime.hosts.")}
    assert not named, named


def test_a_kind_of_host_is_one_registered_module():
    """A kind of host is a module of runtime/hosts/ (this_process) or a `kind` module of a folder of
    it (pd/kind.py), listed in `hosts.KINDS` with a `KIND` that opens; the one that always holds a
    program is last; only the PD-process kind opens the multi-PD pool."""
    from qnnrt.runtime import hosts
    files = {f"qnnrt.runtime.hosts.{f.stem}" for f in (ROOT / "runtime/hosts").glob("*.py")
             if f.stem != "__init__"}
    files |= {f"qnnrt.runtime.hosts.{d.parent.name}.kind" for d in (ROOT / "runtime/hosts").glob("*/kind.py")}
    assert files == set(hosts.KINDS)
    assert hosts.KINDS[-1] == "qnnrt.runtime.hosts.this_process"
    assert all(callable(k.open) and k.name for k in hosts.kinds())
    opening = {n for n, deps in IMPORTS.items() if "qnnrt.runtime.hosts.pd.fleet" in deps}
    assert opening == {"qnnrt.runtime.hosts.pd.kind"}, opening


def test_modules_stay_small():
    """No module of qnnrt over ~450 lines: a module that grows past it is two things."""
    sizes = {str(f.relative_to(ROOT)): len(f.read_text().splitlines()) for f in ROOT.rglob("*.py")}
    assert not {f: n for f, n in sizes.items() if n > 470}


def test_runtime_functions_stay_small():
    """No function of runtime/ over ~80 lines (the hot path's are there and in core/graph.py)."""
    long = []
    for f in [*(ROOT / "runtime").rglob("*.py"), ROOT / "core/call.py", ROOT / "core/binding.py"]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 85:
                    long.append(f"{f.relative_to(ROOT)}:{node.name} {n}")
    assert not long, long


# ------------------------------------------------------------------------------------ SoC table
@pytest.mark.parametrize("name, model, arch", [
    ("SM8850", 87, 81), ("SM8845", 97, 81), ("SM8750", 69, 79), ("SM8735", 85, 79), ("SM8650", 57, 75),
    ("SM8635", 68, 73), ("SM8550", 43, 73), ("SM8475", 42, 69), ("SM8450", 36, 69), ("SM8350", 30, 68),
    ("SC8380XP", 60, 73), ("SA8295", 39, 68), ("SA8255", 52, 73), ("SA8797", 72, 81), ("QCS9100", 77, 73),
    ("QCM6490", 93, 68), ("SXR1230P", 45, 73), ("SXR2230P", 53, 69), ("SXR2330P", 75, 79),
    ("SSG2115P", 46, 73), ("SSG2125P", 58, 73), ("SAR2230P", 95, 81), ("SW6100", 96, 81)])
def test_one_soc_table_for_runtime_and_compiler(name, model, arch):
    from qnnrt.compiler.compile import resolve_soc
    assert soc.parse_soc(name) == model == soc.parse_soc(name.lower()) == soc.parse_soc(str(model))
    assert soc.htp_arch_of(model) == arch and soc.name_of(model) == name
    c = resolve_soc(name)
    assert (c.soc_model, c.htp_arch) == (model, arch)


def test_unknown_soc_is_a_clear_error():
    from qnnrt.compiler.compile import resolve_soc
    with pytest.raises(QnnrtError, match="unknown SoC 'SM9999'.*SM8850"):
        soc.parse_soc("SM9999")
    with pytest.raises(BuildError, match="unknown SoC"):
        resolve_soc("SM9999")


@pytest.mark.slow
def test_run_accepts_sm8850(small_binary):
    r = qnnrt_cli("run", small_binary.path, "--soc", "SM8850", "--iteration", "1")
    assert "unknown SoC" not in r.stderr and "Traceback" not in r.stderr
    assert r.returncode == 0 or "error" in r.stderr   # the simulator may refuse it, with a message


def _compile_spec(model: int, arch: int) -> bytes:
    """A QnnExecuTorchOptions flatbuffer: soc_info { soc_model, htp_info { htp_arch } }."""
    b = flatbuffers.Builder(64)
    b.StartObject(2); b.PrependInt32Slot(0, arch, 0); htp = b.EndObject()
    b.StartObject(2); b.PrependInt32Slot(0, model, 0); b.PrependUOffsetTRelativeSlot(1, htp, 0)
    socinfo = b.EndObject()
    b.StartObject(2); b.PrependUOffsetTRelativeSlot(0, socinfo, 0); root = b.EndObject()
    b.Finish(root)
    return bytes(b.Output())


def test_pte_compile_spec_naming_sm8850_is_understood():
    from qnnrt.executorch.reader import parse_qnn_compile_spec
    spec = parse_qnn_compile_spec(_compile_spec(87, 81))
    assert spec["soc_model"] == "SM8850" and spec["htp_arch"] == 81
    assert soc.parse_soc(spec["soc_model"]) == 87
    assert parse_qnn_compile_spec(_compile_spec(12345, 99))["soc_model"] == "12345"   # not in the table


# -------------------------------------------------------------------------------- one validation
def test_program_path_validates_graph_inputs_once(chain12, monkeypatch):
    import qnnrt.core.binding as binding_mod
    import qnnrt.core.graph as graph_mod
    import qnnrt.core.tensor as tensor_mod
    calls = {"graph": 0}
    real = tensor_mod.prepare_input

    def counting(*a, **k):
        calls["graph"] += 1
        return real(*a, **k)

    monkeypatch.setattr(graph_mod, "prepare_input", counting)
    monkeypatch.setattr(binding_mod, "prepare_input", counting)
    x = np.linspace(-2, 2, 64, dtype=np.float32)[None]
    with qnnrt.load(chain12.model, residency="lazy") as prog:
        m = prog.method()
        prog.run(m.name, {m.inputs[0].name: x.reshape(m.inputs[0].shape)})
    assert calls["graph"] == 0          # Method validated at entry; graph steps skip re-validation


def test_a_subcommand_that_fails_to_import_is_an_error(monkeypatch, capsys):
    import importlib

    cli_main = importlib.import_module("qnnrt.cli.main")  # the module (qnnrt.cli.main is also the function)
    real = importlib.import_module

    def broken(name, *a, **k):
        if name == "qnnrt.cli.plot":
            raise ImportError("No module named 'matplotlib_broken'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", broken)
    monkeypatch.setenv("QNNRT_NO_FORK", "1")
    assert cli_main.main(["inspect", "--help"]) == 1
    assert "failed to import" in capsys.readouterr().err


def test_the_public_api_says_its_parameters_and_returns():
    from qnnrt.runtime.program import Program
    for f in (qnnrt.load, qnnrt.LoadOptions, Program.run, Program.prepare, Program.run_prepared,
              Program.close):
        doc = f.__doc__ or ""
        assert "Returns\n" in doc and ("Parameters\n" in doc or f is Program.close), f.__qualname__


def test_public_api_is_importable_and_typed():
    for name in ("load", "LoadOptions", "Program", "Method", "IOSpec", "Residency", "QnnrtError",
                 "QnnError", "FormatError", "InputError", "KernelError"):
        assert hasattr(qnnrt, name), name
    assert (ROOT / "py.typed").exists()


# ------------------------------------------------------------------------ runtime/ knows no .pte
def _members(package: str) -> set[str]:
    """Names the classes of a package define: methods, class attributes, `self.X = ...`."""
    names: set[str] = set()
    for f in (ROOT / package).rglob("*.py"):
        for cls in (n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                        and isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
    return names


def _attributes_read(package: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute):
                out.setdefault(node.attr, set()).add(str(f.relative_to(ROOT)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant):
                out.setdefault(str(node.args[1].value), set()).add(str(f.relative_to(ROOT)))
    return out


def test_runtime_names_no_attribute_of_an_executorch_class():
    """runtime/ runs .pte methods through the Method / Plan interfaces only: it reads no attribute
    that only an executorch class defines (as it once read `method._calls`, `method._runner`, a
    duck-typed `compile_plan`). Names library types also have (dict.get, Future.result, ...) are
    not telling and left out."""
    from concurrent.futures import Future

    import onnx
    own = _members("runtime") | _members("core") | _members("profiling") | _members("formats")
    library = {n for t in (dict, list, str, bytes, memoryview, set, tuple, np.ndarray, np.dtype, Future)
               for n in dir(t)}
    library |= {f.name for m in (onnx.ModelProto, onnx.GraphProto, onnx.NodeProto, onnx.TensorProto,
                                 onnx.ValueInfoProto) for f in m.DESCRIPTOR.fields}
    only_executorch = _members("executorch") - own - library
    assert {"runner", "delegates", "analysis"} <= only_executorch   # the scan sees them
    read = _attributes_read("runtime")
    bad = {name: sorted(read[name]) for name in only_executorch | {"compile_plan"} if name in read}
    assert not bad, f"runtime/ reads executorch-only attributes: {bad}"


def test_no_module_reads_a_private_attribute_on_the_fast_path():
    """The fast path's modules read no `_private` attribute of another object (only `self._x`)."""
    files = ["core/call.py", "core/binding.py", "core/graph.py", "runtime/plan.py", "runtime/steps.py",
             "runtime/program.py",
             "runtime/method.py", "executorch/plan.py", "executorch/program.py"]
    bad = []
    for rel in files:
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                bad.append(f"{rel}:{node.lineno} .{node.attr}")
    assert not bad, bad


def test_the_wire_between_processes_does_not_pickle():
    """Messages between qnnrt's processes are typed (runtime/ipc/wire.py), a plan segment's steps
    included (descriptors, runtime/hosts/pd/portable.py): no runtime module pickles."""
    pickling = {str(f.relative_to(ROOT)) for f in (ROOT / "runtime").rglob("*.py")
                if "pickle" in {a.name for n in ast.walk(ast.parse(f.read_text()))
                                if isinstance(n, ast.Import) for a in n.names}}
    assert not pickling, pickling


def test_a_program_takes_one_options_object():
    """How a Program runs is one frozen `ProgramOptions`, not a keyword argument per setting."""
    import dataclasses
    import inspect
    from qnnrt.runtime.program import Program, ProgramOptions
    params = list(inspect.signature(Program.__init__).parameters)
    assert params == ["self", "path", "binaries", "method_builder", "backend", "options", "owned",
                      "constants"], params
    assert dataclasses.is_dataclass(ProgramOptions) and ProgramOptions.__dataclass_params__.frozen
