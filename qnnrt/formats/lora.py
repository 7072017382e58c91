"""The LoRA inputs of a converted bundle (`qnnrt convert --lora-rank R --lora-targets ...`), as plain
data: which projections of which layers take an adapter, the rank, and the graph input names.

Each targeted projection y = x W of layer i gets two graph inputs, ``lora_a_<i>_<target>`` [in, R]
and ``lora_b_<i>_<target>`` [R, out], and every part graph one ``lora_scale`` [1]:
y = x W + lora_scale * (x A) B. Zeros (or scale 0) mean no adapter. A PEFT adapter's lora_A.weight
[R, in] and lora_B.weight [out, R] are the transposes.

The section lives in the bundle's ``qnnrt_convert.json`` (key ``lora``), not in genie_config.json:
libGenie.so reads genie_config.json with its own schema (its LoRA section describes binary-section
adapters, not input adapters), and qnnrt's record is the file that already says how the bundle was
made. Writer: qnnrt/convert/lora.py; readers: qnnrt/llm/lora.py."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qnnrt.errors import FormatError

CONVERT_RECORD = "qnnrt_convert.json"
SCALE_INPUT = "lora_scale"
# target name (PEFT / Hugging Face module) -> (the module path inside a decoder layer, canonical weight)
TARGETS: dict[str, tuple[str, str]] = {
    "q_proj": ("self_attn.q_proj", "wq"), "k_proj": ("self_attn.k_proj", "wk"),
    "v_proj": ("self_attn.v_proj", "wv"), "o_proj": ("self_attn.o_proj", "wo"),
    "gate_proj": ("mlp.gate_proj", "wg"), "up_proj": ("mlp.up_proj", "wu"),
    "down_proj": ("mlp.down_proj", "wd"),
}


def a_name(layer: int, target: str) -> str:
    return f"lora_a_{layer}_{target}"


def b_name(layer: int, target: str) -> str:
    return f"lora_b_{layer}_{target}"


@dataclass(frozen=True)
class LoraSlots:
    """What a bundle's graphs take: ``rank``, ``targets`` (in TARGETS' order), ``layers``, and each
    target's (in, out) features."""
    rank: int
    targets: tuple[str, ...]
    layers: int
    dims: dict[str, tuple[int, int]]

    def inputs(self) -> dict[str, tuple[int, ...]]:
        """Every LoRA graph input and its shape (the scale included)."""
        out: dict[str, tuple[int, ...]] = {SCALE_INPUT: (1,)}
        for i in range(self.layers):
            for t in self.targets:
                fin, fout = self.dims[t]
                out[a_name(i, t)] = (fin, self.rank)
                out[b_name(i, t)] = (self.rank, fout)
        return out

    def to_record(self) -> dict:
        return {"rank": self.rank, "targets": list(self.targets), "layers": self.layers,
                "dims": {t: list(d) for t, d in self.dims.items()}, "scale_input": SCALE_INPUT,
                "inputs": "lora_a_<layer>_<target> [in, rank], lora_b_<layer>_<target> [rank, out]: "
                          "y = x W + lora_scale * (x A) B"}

    @staticmethod
    def from_record(d: dict, where: str) -> "LoraSlots":
        try:
            rank, layers = int(d["rank"]), int(d["layers"])
            targets = tuple(str(t) for t in d["targets"])
            dims = {str(t): (int(v[0]), int(v[1])) for t, v in d["dims"].items()}
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise FormatError(f"{where}: the 'lora' section is malformed ({e!r}); convert the model again "
                              f"with --lora-rank / --lora-targets") from None
        unknown = [t for t in targets if t not in TARGETS or t not in dims]
        if unknown or rank < 1 or layers < 1:
            raise FormatError(f"{where}: the 'lora' section names targets {unknown} / rank {rank} / layers "
                              f"{layers}; expected targets among {list(TARGETS)}, rank and layers >= 1")
        return LoraSlots(rank, targets, layers, dims)


def read_slots(bundle: Path) -> LoraSlots | None:
    """The LoRA inputs a bundle folder's record declares (None: a bundle without LoRA inputs)."""
    path = Path(bundle) / CONVERT_RECORD
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: cannot be read as JSON ({e}); restore it from the conversion") from None
    section = rec.get("lora") if isinstance(rec, dict) else None
    return None if section is None else LoraSlots.from_record(section, str(path))
