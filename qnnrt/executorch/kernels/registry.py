"""The kernel registry: operator name -> KernelDef, registration and lookup, run_kernel."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import cast_to_out


@dataclass(frozen=True)
class OutInfo:
    """What a kernel knows about its out tensor: dtype and (static / upper-bound) shape."""
    dtype: np.dtype | None   # None: unknown, the result is returned as computed
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KernelDef:
    name: str
    fn: Callable[..., Any]
    n_args: int          # schema arguments, out tensors included
    n_out: int = 1       # trailing out tensor arguments
    cast: str = "same_kind"   # how the result may be cast to the out dtype: strict | same_kind | any

    @property
    def n_inputs(self) -> int:
        return self.n_args - self.n_out


KERNELS: dict[str, KernelDef] = {}


KernelFn = TypeVar("KernelFn", bound=Callable[..., np.ndarray])


def register_kernel(name: str, n_args: int, n_out: int = 1,
                    cast: str = "same_kind") -> Callable[[KernelFn], KernelFn]:
    """Decorator: register ``fn(*inputs, out=OutInfo|None) -> np.ndarray`` under ``name``."""
    def deco(fn: KernelFn) -> KernelFn:
        KERNELS[name] = KernelDef(name, fn, n_args, n_out, cast)
        return fn
    return deco


def get_kernel(name: str) -> KernelDef:
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelError(f"no CPU kernel for operator {name!r}; qnnrt implements: "
                          f"{', '.join(sorted(KERNELS))}") from None


def supported_operators() -> list[str]:
    return sorted(KERNELS)


def missing_operators(names: Iterable[str]) -> list[str]:
    """The names (unique, first-seen order) that have no registered kernel."""
    out: dict[str, None] = {}
    for n in names:
        if n not in KERNELS:
            out.setdefault(n, None)
    return list(out)


def run_kernel(name: str, inputs: Sequence[Any], out: OutInfo | None = None) -> np.ndarray:
    """Run a registered kernel and cast its result to ``out`` (convenience for tests and tools)."""
    k = get_kernel(name)
    if len(inputs) != k.n_inputs:
        raise KernelError(f"{name} takes {k.n_inputs} arguments before out, got {len(inputs)}")
    return cast_to_out(k.fn(*inputs, out=out), out, name, k.cast)
