"""Export a SmolLM2-135M-shaped hybrid LLM .pte with ExecuTorch's own Qualcomm LLM script, offline.

What bench/RESULTS.md's "Issue 29 on a real SmolLM2-135M-shaped export" section measures. The file is
made by ExecuTorch 1.5.1's `examples/qualcomm/oss_scripts/llama/llama.py` (the copy in the executorch
wheel, run in this process through its own `main()`), `--decoder_model smollm2_135m`, hybrid mode
(`prefill_forward` AR 32 + `kv_forward` AR 1), fp16, context 256, x86 settings, compile only, with:

- random weights: `static_llama.LlamaModel`'s own initialisation under `torch.manual_seed(SEED)`,
  built from the same model args the script builds, saved as a Meta-format checkpoint
  (`--checkpoint`; the script permutes wq / wk itself and loads it strictly). The output projection
  is the model's own random one (SmolLM2 ties it to the embedding; a tied random model only repeats
  its input token, which compares nothing; `--tied` makes that file too: output.weight = the
  embedding);
- the tokenizer read from tests/data/llm/hf_tokenizer_smollm2 (the config's Hub repo id is pointed at
  that folder; no network: HF_HUB_OFFLINE=1);
- `--params`: the wheel lacks examples/models/smollm2/135M_config.json, so SmolLM2-135M's
  architecture (the values of that file and of the model's Hugging Face config: 30 layers, dim 576,
  9 heads / 3 KV heads of 64, hidden 1536, vocab 49152, rope theta 1e5) is written next to the output;
- packages llama.py's modules import but this export never uses, stubbed when absent (STUBBED:
  torchtune for the registry's weight converters, unused with a checkpoint; datasets and lm_eval for
  Hub / lm-eval calibration; pydot for the debugger's SVG output).

Run with the ExecuTorch environment's python (`bench/anchor/setup.sh ANCHOR`, then `. ANCHOR/env.sh`),
which also needs `transformers` (llama.py's tokenizer and model code import it; not an ExecuTorch
requirement):

    $ET_PY -m pip install transformers==5.24.0
    nice -n 10 $ET_PY bench/make_smollm2_pte.py OUT_DIR

Measured with torch 2.13.0+cpu, executorch 1.5.1, onnxruntime-qnn 2.7.0 (QNN 2.51), transformers
5.24.0: llama.py 10 min 40 s on 2 cores at load average 9-17 (under 6 min on a quieter machine),
8.7 GB peak RSS, a 654,835,712-byte file. OUT_DIR gets model.pte (the script's hybrid_llama_qnn.pte,
moved), meta.json (command, versions, sizes, time, sha256), the checkpoint (~650 MB; delete it once
the file is made), params and calibration files, and llama.py's artifact folder (work/: the tokenizer
it saved).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import resource
import sys
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "tests" / "data" / "llm" / "hf_tokenizer_smollm2"
DECODER_MODEL = "smollm2_135m"
# SmolLM2-135M's architecture in ExecuTorch's params format (examples/models/smollm2/135M_config.json)
SMOLLM2_135M_PARAMS = {
    "dim": 576, "ffn_dim_multiplier": 1, "hidden_dim": 1536, "n_heads": 9, "n_kv_heads": 3,
    "n_layers": 30, "norm_eps": 1e-05, "rope_theta": 100000.0, "use_scaled_rope": False,
    "vocab_size": 49152, "use_hf_rope": False, "attention_qkv_bias": False,
}
PROMPT = "Once upon a time"
STUBBED = ("torchtune", "datasets", "lm_eval", "pydot")
# llama.py wants calibration data even for fp16 (where it skips quantization): one short sample
CALIB = [{"messages": [{"role": "user", "content": PROMPT}]}]


class _AbsentModule(types.ModuleType):
    """A stand-in for a package that is imported but not used: any attribute is a placeholder class
    (callable, subclassable) that fails only if called."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        where = f"{self.__name__}.{name}"

        def absent(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError(f"{where} is a stub (bench/make_smollm2_pte.py)")

        return type(name, (), {"__init__": absent, "__module__": self.__name__})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname == self.root or fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        mod = _AbsentModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def stub_if_missing(root: str) -> bool:
    try:
        __import__(root)
        return False
    except ImportError:
        sys.meta_path.insert(0, _StubFinder(root))
        return True


def llama_argv(a: argparse.Namespace, work: Path, ckpt: Path, params: Path, calib: Path) -> list[str]:
    return [
        "--decoder_model", DECODER_MODEL, "--checkpoint", str(ckpt), "--params", str(params),
        "--model_mode", "hybrid", "--max_seq_len", str(a.context), "--max_context_len", str(a.context),
        "--prefill_ar_len", str(a.prefill_ar_len), "--soc_model", a.soc, "--enable_x86_64", "--use_fp16",
        "--compile_only", "--calib_samples", str(calib), "--calib_limit", "1", "--prompt", PROMPT,
        "--temperature", "0", "--artifact", str(work), "--build_folder", str(work / "build"),
    ]


def write_checkpoint(llama: Any, argv: list[str], params: dict[str, Any], seed: int, path: Path,
                     tied: bool = False) -> int:
    """static_llama.LlamaModel's own init under seed `seed`, from the model args llama.py builds for the
    decode graph (the prefill and calibration graphs have the same parameters), as a state dict."""
    import torch
    from executorch.examples.qualcomm.oss_scripts.llama import SUPPORTED_LLM_MODELS
    from executorch.examples.qualcomm.oss_scripts.llama.model.static_llama import LlamaModel, ModelArgs
    from executorch.examples.qualcomm.oss_scripts.llama.wrappers.base_component import Mode, process_model_args

    args = llama._build_parser().parse_args(argv)  # noqa: SLF001 - llama.py's own parser, its defaults
    config = SUPPORTED_LLM_MODELS[DECODER_MODEL]
    model_args = process_model_args(args, ModelArgs(**params), config.quant_recipe(False), config, Mode.DECODE)
    torch.manual_seed(seed)
    model = LlamaModel(model_args, ar_len=model_args.ar_len, output_new_cache_only=True, output_cache=True,
                       use_i64_token=False)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if tied:
        state["output.weight"] = state["tok_embeddings.weight"].clone()
    torch.save(state, path)
    return sum(v.numel() for v in state.values())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--context", type=int, default=256, help="max_seq_len = max_context_len")
    ap.add_argument("--prefill-ar-len", type=int, default=32)
    ap.add_argument("--soc", default="SM8650")
    ap.add_argument("--tied", action="store_true", help="the output projection tied to the embedding, as SmolLM2's")
    a = ap.parse_args()
    out = Path(a.out_dir).resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    params_path, ckpt, calib = out / "135M_config.json", out / "smollm2_seed0_ckpt.pt", out / "calib.json"
    params_path.write_text(json.dumps(SMOLLM2_135M_PARAMS, indent=2) + "\n")
    calib.write_text(json.dumps(CALIB) + "\n")

    stubbed = [m for m in STUBBED if stub_if_missing(m)]
    from executorch.examples.qualcomm.oss_scripts.llama import SUPPORTED_LLM_MODELS
    from executorch.examples.qualcomm.oss_scripts.llama import llama as llama_py

    config = SUPPORTED_LLM_MODELS[DECODER_MODEL]
    hub_repo = config.repo_id
    object.__setattr__(config, "repo_id", str(TOKENIZER))  # a frozen dataclass instance: its tokenizer source

    argv = llama_argv(a, work, ckpt, params_path, calib)
    n_params = write_checkpoint(llama_py, argv, SMOLLM2_135M_PARAMS, a.seed, ckpt, a.tied)
    print(f"checkpoint: {n_params:,} parameters (seed {a.seed}) -> {ckpt.name}", flush=True)

    t0 = time.perf_counter()
    sys.argv = [llama_py.__file__, *argv]
    llama_py.main()
    wall = time.perf_counter() - t0

    produced = work / "hybrid_llama_qnn.pte"
    model = out / "model.pte"
    os.replace(produced, model)
    import executorch
    import torch

    versions = {"torch": torch.__version__, "executorch": getattr(executorch, "__version__", None)}
    for dist in ("executorch", "onnxruntime-qnn", "transformers", "numpy"):
        try:
            from importlib.metadata import version
            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001 - a version we cannot read is recorded as unknown
            versions[dist] = None
    meta = {
        "maker": "bench/make_smollm2_pte.py",
        "llama_py": "executorch/examples/qualcomm/oss_scripts/llama/llama.py (the executorch wheel's copy)",
        "llama_py_argv": [s.replace(str(out), "OUT_DIR") for s in argv],
        "decoder_model": DECODER_MODEL, "hub_repo_id_replaced_by": "tests/data/llm/hf_tokenizer_smollm2",
        "params": SMOLLM2_135M_PARAMS, "seed": a.seed, "tied": a.tied, "checkpoint_parameters": n_params,
        "stubbed": stubbed, "versions": versions,
        "size_bytes": model.stat().st_size, "sha256": sha256(model),
        "export_wall_s": round(wall, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "hub_repo_id": hub_repo,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({k: meta[k] for k in ("size_bytes", "sha256", "export_wall_s", "peak_rss_gb")}))
    print(f"wrote {model}")


if __name__ == "__main__":
    main()
