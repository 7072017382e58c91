"""LoRA adapters bound to a converted bundle's LoRA inputs (formats/lora.py), per request.

Each adapter (a PEFT folder, formats/peft.py) is read once, checked against the bundle, cast to the
graphs' input dtypes into arrays of the program's buffers (the shared arena under multi-PD), and kept.
"No adapter" is one set of zeros. The prepared methods are bound per (KV cache, adapter): the first
use of an adapter with a cache prepares its methods over that adapter's arrays, every later switch
picks the bound methods (a re-bind: no weights copied, per token or per switch). A KV cache holds
the entries of the adapter that wrote them: callers that reuse a cache between turns key it by the
adapter too (`CacheKey`)."""
from __future__ import annotations

import weakref
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from qnnrt.errors import FormatError, InputError
from qnnrt.formats.lora import LoraSlots
from qnnrt.formats.peft import PeftAdapter
from qnnrt.llm.kv_cache import KVCache
from qnnrt.llm.layout import IOTensor, LlmLayout
from qnnrt.llm.prepared import PreparedSteps
from qnnrt.runtime.plan import CallerArrays
from qnnrt.runtime.program import PreparedMethod, Program

Alloc = Callable[[tuple, np.dtype], np.ndarray]


def parse_lora_specs(texts: Sequence[str]) -> dict[str, Path]:
    """``NAME=DIR[,NAME=DIR]`` (repeatable) as {name: folder}; InputError naming the bad item."""
    out: dict[str, Path] = {}
    for text in texts:
        for item in (x.strip() for x in text.split(",")):
            if not item:
                continue
            name, sep, folder = item.partition("=")
            name = name.strip()
            if not sep or not name or not folder.strip():
                raise InputError(f"--lora {item!r}: give NAME=DIR (a name for the adapter and its PEFT folder)")
            if name in out:
                raise InputError(f"--lora {name}: the name is given twice")
            out[name] = Path(folder.strip())
    return out


def load_adapters(adapters: AdapterSet | None, specs: Mapping[str, Path], where: str) -> None:
    """Load ``specs`` ({name: PEFT folder}) into a runner's adapters; errors name the adapter."""
    if specs and adapters is None:
        raise InputError(f"{where} takes no LoRA adapters (its graphs have no LoRA inputs); convert the model "
                         f"with qnnrt convert --lora-rank R --lora-targets q_proj,v_proj,...")
    for name, folder in specs.items():
        assert adapters is not None
        try:
            adapters.load(name, folder)
        except FormatError as e:
            raise FormatError(f"--lora {name}: {e}") from None


class AdapterSet:
    """The adapters of one runner: ``active`` (None: no adapter) and each one's arrays by graph input."""

    def __init__(self, slots: LoraSlots, specs: Sequence[IOTensor], alloc: Alloc) -> None:
        self.slots, self.alloc = slots, alloc
        self.specs = {s.name: s for s in specs}
        want = slots.inputs()
        if set(want) != set(self.specs):
            raise FormatError(f"the bundle's record declares LoRA inputs the graphs do not take (or the other way "
                              f"round): {sorted(set(want) ^ set(self.specs))[:4]}; convert the model again")
        for s in specs:
            if s.quant is not None or s.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
                raise FormatError(f"LoRA input {s.name} is {s.dtype}; only float inputs can take adapters")
        self._sets: dict[str | None, dict[str, np.ndarray]] = {None: self._cast({})}
        self.folders: dict[str, Path] = {}
        self.active: str | None = None

    def _cast(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, s in self.specs.items():
            buf = self.alloc(s.shape, s.dtype)
            src = arrays.get(name)
            buf[...] = 0 if src is None else src.reshape(s.shape)
            out[name] = buf
        return out

    def load(self, name: str, folder: str | Path) -> PeftAdapter:
        """Read, check and cast the PEFT folder as adapter ``name`` (FormatError on a mismatch)."""
        adapter = PeftAdapter.load(folder, self.slots)
        self._sets[name] = self._cast(adapter.arrays)
        self.folders[name] = Path(folder)
        return adapter

    @property
    def names(self) -> list[str]:
        return list(self.folders)

    def use(self, name: str | None) -> None:
        if name not in self._sets:
            raise InputError(f"no adapter {name!r}; loaded: {', '.join(self.names) or 'none'}")
        self.active = name

    def arrays(self, name: str | None = None) -> dict[str, np.ndarray]:
        return self._sets[self.active if name is None else name]


class AdapterSteps(PreparedSteps):
    """PreparedSteps whose methods are bound per (cache, adapter): switching adapters picks other
    bound methods; the adapters' arrays are never copied."""

    def __init__(self, program: Program, layout: LlmLayout, calls: dict[str, int], adapters: AdapterSet) -> None:
        self.adapters = adapters
        self._per: weakref.WeakKeyDictionary[KVCache, dict[str | None, dict[str, PreparedMethod]]] = \
            weakref.WeakKeyDictionary()
        super().__init__(program, layout, calls)

    def prepare(self, cache: KVCache) -> dict[str, PreparedMethod]:
        per = self._per.get(cache)
        if per is None:
            per = self._per[cache] = {}
        name = self.adapters.active
        bound = per.get(name)
        if bound is None:
            extra = self.adapters.arrays(name)
            bound = {}
            for n, b in self.buffers.items():
                arrays = b.caller_arrays(cache)
                ins = {**arrays.inputs, **{s.name: extra[s.name] for s in b.method.adapter_inputs}}
                bound[n] = self.program.prepare(n, CallerArrays(ins, arrays.outputs))
            per[name] = bound
        return bound
