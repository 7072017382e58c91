"""PEFT adapter folders checked against a bundle's LoRA inputs (formats/peft.py), without QNN: each
mismatch is one clear error naming the file and the tensor or key; what loads is exact (transposed,
zero-padded to the bundle's rank, bf16 widened bit-exactly, scale alpha / r or alpha / sqrt r)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from qnnrt.convert.lora import check_lora_options, slots_for
from qnnrt.convert.options import ConvertOptions
from qnnrt.convert.spec import ConvertError
from qnnrt.errors import FormatError, InputError
from qnnrt.formats.lora import LoraSlots, a_name, b_name
from qnnrt.formats.peft import PeftAdapter, read_tensors
from qnnrt.formats.safetensors_file import save_safetensors
from qnnrt.llm.lora import parse_lora_specs
from tests.helpers.genie_bundle import fixture_module

ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DIMS = {"q_proj": (64, 64), "k_proj": (64, 32), "v_proj": (64, 32), "o_proj": (64, 64), "gate_proj": (64, 128),
        "up_proj": (64, 128), "down_proj": (128, 64)}


def slots(rank: int = 4, targets: tuple[str, ...] = ALL, layers: int = 3, dims=DIMS) -> LoraSlots:
    return LoraSlots(rank, targets, layers, {t: dims[t] for t in targets})


@pytest.fixture(scope="module")
def made(models, tmp_path_factory) -> dict[str, Path]:
    return fixture_module("make_lora_adapters").make(models["llama"], tmp_path_factory.mktemp("peft"))


@pytest.fixture
def copy(made, tmp_path):
    def copy_of(name: str) -> Path:
        return Path(shutil.copytree(made[name], tmp_path / name))
    return copy_of


def test_slots_of_the_tiny_llama(models) -> None:
    from qnnrt.convert import open_model
    assert slots_for(open_model(models["llama"]).spec, 4, ALL[::-1]) == slots()     # TARGETS' order


def test_loaded_weights_are_exact(made) -> None:
    """terse (r 4 = the bundle's, F32): A^T, B^T as stored, scale 8 / 4; wordy (r 2, BF16, rslora):
    padded with zero columns / rows, scale 4 / sqrt 2; targets an adapter lacks are zeros."""
    terse, wordy = PeftAdapter.load(made["terse"], slots()), PeftAdapter.load(made["wordy"], slots())
    raw = read_tensors(made["terse"] / "adapter_model.safetensors")
    a = raw["base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"]
    assert np.array_equal(terse.arrays[a_name(1, "q_proj")], a.T) and terse.arrays["lora_scale"][0] == 2.0
    assert not terse.arrays[a_name(0, "k_proj")].any() and not terse.arrays[b_name(2, "down_proj")].any()
    assert wordy.arrays["lora_scale"][0] == pytest.approx(4 / np.sqrt(2))
    assert wordy.arrays[a_name(0, "up_proj")][:, :2].any() and not wordy.arrays[a_name(0, "up_proj")][:, 2:].any()
    assert not wordy.arrays[b_name(2, "o_proj")][2:].any()
    bits = wordy.arrays[b_name(0, "gate_proj")][:2].view(np.uint32)
    assert not (bits & 0xFFFF).any()          # bf16 widened: the low half of every float32 is zero


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "adapter_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def _drop_tensor(folder: Path, name: str, rename: str | None = None) -> None:
    path = folder / "adapter_model.safetensors"
    tensors = read_tensors(path)
    t = tensors.pop(name)
    if rename:
        tensors[rename] = t
    save_safetensors(path, tensors)


Q0A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"


@pytest.mark.parametrize("case, message", [
    ("no config", "adapter_config.json: missing"),
    ("not lora", "peft_type 'IA3'"),
    ("dora", "use_dora = True is not supported"),
    ("rank", "r = 4 but the bundle's LoRA inputs have rank 2; convert the model with --lora-rank 4"),
    ("targets", "target_modules ['v_proj'] take no adapter in this bundle"),
    ("shape", f"tensor '{Q0A}' has shape [4, 64]; this bundle takes [4, 48]"),
    ("missing", f"tensor '{Q0A}' is missing"),
    ("extra", "are not LoRA weights of this bundle's 2 layers"),
    ("truncated", "the file is truncated or damaged"),
    ("regex", "a regular expression is not supported"),
])
def test_mismatches_name_the_file_and_tensor(copy, case, message) -> None:
    folder, bundle = copy("terse"), slots()
    if case == "no config":
        (folder / "adapter_config.json").unlink()
    elif case == "not lora":
        _edit_config(folder, peft_type="IA3")
    elif case == "dora":
        _edit_config(folder, use_dora=True)
    elif case == "rank":
        bundle = slots(rank=2)
    elif case == "targets":
        bundle = slots(targets=("q_proj", "k_proj"))
    elif case == "shape":
        bundle = slots(dims={**DIMS, "q_proj": (48, 64)})
    elif case == "missing":
        _drop_tensor(folder, Q0A, rename="base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight")
    elif case == "extra":
        bundle = slots(layers=2)
    elif case == "truncated":
        path = folder / "adapter_model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])
    elif case == "regex":
        _edit_config(folder, target_modules=".*q_proj")
    with pytest.raises(FormatError) as e:
        PeftAdapter.load(folder, bundle)
    assert message in str(e.value) and str(folder) in str(e.value)


def test_lora_specs_and_convert_options() -> None:
    assert parse_lora_specs(["a=/x,b=/y", "c=/z"]) == {"a": Path("/x"), "b": Path("/y"), "c": Path("/z")}
    for bad, message in ((["a"], "give NAME=DIR"), (["a=/x,a=/y"], "given twice"), (["=/x"], "give NAME=DIR")):
        with pytest.raises(InputError, match=message):
            parse_lora_specs(bad)
    for kwargs, message in (({"lora_targets": ("q_proj",)}, "--lora-targets needs --lora-rank"),
                            ({"lora_rank": 4}, "--lora-rank needs --lora-targets"),
                            ({"lora_rank": 0, "lora_targets": ("q_proj",)}, "give a rank from 1"),
                            ({"lora_rank": 4, "lora_targets": ("qkv",)}, "--lora-targets qkv: not a projection"),
                            ({"lora_rank": 4, "lora_targets": ("q_proj",), "precision": "w8a16"}, "fp16 bundles only")):
        with pytest.raises(ConvertError, match=message):
            ConvertOptions(**kwargs)
    check_lora_options(None, (), "w8a16")       # no LoRA: any precision
