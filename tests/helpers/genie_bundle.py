"""The Genie bundles' maker modules (tools/fixtures), imported from their files for the tests, and what a
bundle's files say."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

FIXTURE_TOOLS = Path(__file__).resolve().parents[2] / "tools" / "fixtures"
GENIE_RUNNER = FIXTURE_TOOLS.parent / "genie_reference.py"


def fixture_module(name: str) -> ModuleType:
    """tools/fixtures/<name>.py as a module (once per session)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FIXTURE_TOOLS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Bundle:
    """A bundle folder's config, references and the model spec it was made from."""
    root: Path
    config: dict
    meta: dict

    @staticmethod
    def load(root: Path) -> "Bundle":
        return Bundle(root, json.loads((root / "genie_config.json").read_text()),
                      json.loads((root / "references.json").read_text()))

    @property
    def spec(self):
        model = fixture_module("genie_tiny_llama")
        return model.Spec(**{k: tuple(v) if isinstance(v, list) else v for k, v in self.meta["spec"].items()})

    @property
    def ctx_bins(self) -> list[Path]:
        return [self.root / b for b in self.config["dialog"]["engine"]["model"]["binary"]["ctx-bins"]]

    def weights(self) -> dict:
        import numpy as np
        with np.load(self.root / "weights.npz") as z:
            return {k: z[k] for k in z.files}


def run_genie(bundle: Path, *args: str) -> subprocess.CompletedProcess:
    """tools/genie_reference.py (libGenie.so) on `bundle` with `args`, its result as JSON on stdout."""
    return subprocess.run([sys.executable, str(GENIE_RUNNER), str(bundle), *args, "--json"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
