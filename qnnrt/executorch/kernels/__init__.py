"""numpy CPU kernels for the operators ExecuTorch leaves outside delegates, keyed by operator name.

Keys are ExecuTorch's qualified names (``Operator.name`` + "." + ``Operator.overload``), e.g.
``aten::mm.out``. Each kernel follows the operator's schema (PyTorch ``native_functions.yaml`` /
ExecuTorch ``quantized.yaml``): a KernelCall's ``args`` are every schema argument in order (defaults
filled in by the emitter), the out tensor(s) last, then the returned value(s) (the same value index as
``out`` for these ops).

Semantics follow PyTorch's eager CPU operators:

* type promotion: categories bool < integer < floating; among operands of equal priority the larger
  type wins; dimensioned tensors outrank zero-dim tensors, which outrank Python scalars (Int /
  Double / Bool values), and a lower-priority operand only changes the result when it is of a higher
  category (a float scalar then yields the default float type, float32). ``float16 + int64 -> float16``.
* reduced-precision floats (float16 / bfloat16) are computed in float32 and rounded once (PyTorch's
  "opmath"); the result is rounded to the common dtype and then cast to the out tensor's dtype, which
  must be a legal cast (no float -> integer, no non-bool -> bool) unless the op is a copy.
* broadcasting as numpy (= PyTorch); alpha / beta scalars; ``div`` rounding modes; reductions with
  ``dim`` None or [] meaning all dimensions; out shapes computed from the inputs.

``KERNELS`` maps names to :class:`KernelDef`; :func:`missing_operators` lists names without a kernel.
"""
from __future__ import annotations

from qnnrt.errors import KernelError
# the family modules register their kernels on import
from qnnrt.executorch.kernels import copy, elementwise, linalg, quantized, reduction, shape  # noqa: F401
from qnnrt.executorch.kernels.dtypes import astype, can_cast, cast_to_out, promote_types, result_type
from qnnrt.executorch.kernels.registry import (
    KERNELS,
    KernelDef,
    OutInfo,
    get_kernel,
    missing_operators,
    register_kernel,
    run_kernel,
    supported_operators,
)

__all__ = [
    "KERNELS",
    "KernelDef",
    "KernelError",
    "OutInfo",
    "astype",
    "can_cast",
    "cast_to_out",
    "get_kernel",
    "missing_operators",
    "promote_types",
    "register_kernel",
    "result_type",
    "run_kernel",
    "supported_operators",
]
