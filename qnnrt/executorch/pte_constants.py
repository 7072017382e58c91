"""Constant methods of a ``.pte`` (ExecuTorch's LLM exports store metadata such as the context
length as methods that return a constant): which methods are, and their values."""
from __future__ import annotations

from typing import Any

import numpy as np

from qnnrt.executorch.pte_model import DelegateCall, KernelCall, PteMethod

_SCALAR_KINDS = ("int", "bool", "double", "string")
_LIST_KINDS = ("double_list", "bool_list")


def is_constant_method(method: PteMethod) -> bool:
    """A method without inputs or delegates whose outputs are scalars, lists of them or constant
    tensors (what ExecuTorch's exporters write for metadata: ``get_n_layers``, ...)."""
    if method.inputs or method.delegates or not method.outputs:
        return False
    if any(isinstance(i, (KernelCall, DelegateCall)) for i in method.instructions):
        return False
    for o in method.outputs:
        v = method.values[o.value_index]
        if v.kind in _SCALAR_KINDS + _LIST_KINDS + ("int_list",):
            continue
        if v.kind == "tensor" and v.value.has_initial_data:
            continue
        return False
    return True


def constant_method_value(method: PteMethod) -> Any:
    """The value a constant method returns: one output -> that value, several -> a list (an
    exported Python list, e.g. ``[scale, zero_point, qmin, qmax, "torch.uint8"]``). Ints, floats,
    bools and strings as Python values, int/float/bool lists as lists, tensors as numpy arrays."""
    out = []
    for o in method.outputs:
        v = method.values[o.value_index]
        if v.kind in _SCALAR_KINDS:
            x: Any = v.value
            if v.kind == "string" and isinstance(x, (bytes, bytearray)):
                x = x.decode(errors="replace")
        elif v.kind in _LIST_KINDS:
            x = list(v.value)
        elif v.kind == "int_list":
            x = [int(method.values[j].value) for j in v.value]
        else:
            x = np.array(method.constant(o.value_index))
        out.append(x)
    return out[0] if len(out) == 1 else out
