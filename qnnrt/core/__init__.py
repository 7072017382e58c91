"""Owned handles over the QNN ABI: explicit lifetimes, context managers, idempotent close."""
from qnnrt._capi import codes as qnn_codes  # QNN error codes and names, for the layers above
from qnnrt._capi.library import QnnLibrary, open_library
from qnnrt._capi.types import LOG_LEVEL_NAMES, LogLevel, LogLevelName
from qnnrt.core.backend import Backend, live_contexts_in_process
from qnnrt.core.binary import BinaryInfo, ContextBinary, GraphSpec
from qnnrt.core.context import Context
from qnnrt.core.graph import Graph
from qnnrt.core.profile import PROFILE_LEVELS, Profile
from qnnrt.core.tensor import Quantization, TensorSpec

__all__ = ["Backend", "ContextBinary", "BinaryInfo", "GraphSpec", "Context", "Graph", "Profile",
           "TensorSpec", "Quantization", "QnnLibrary", "open_library", "live_contexts_in_process", "PROFILE_LEVELS",
           "LogLevel", "LogLevelName", "LOG_LEVEL_NAMES", "qnn_codes"]
