"""QNN error codes -> names (the remedies users read live in qnnrt.errors)."""
from __future__ import annotations

_BASES = {"COMMON": 1000, "PROPERTY": 2000, "OP_PACKAGE": 3000, "BACKEND": 4000, "CONTEXT": 5000,
          "GRAPH": 6000, "TENSOR": 7000, "MEM": 8000, "SIGNAL": 9000, "ERROR": 10000, "LOG": 11000,
          "PROFILE": 12000, "PERF_INFRASTRUCTURE": 13000, "DEVICE": 14000, "GLOBAL_CONFIG": 15000,
          "SYSTEM": 30000}

_OFFSETS = {
    "COMMON": {0: "NOT_SUPPORTED", 2: "MEM_ALLOC", 3: "SYSTEM", 4: "INVALID_ARGUMENT",
               5: "OPERATION_NOT_PERMITTED", 6: "PLATFORM_NOT_SUPPORTED",
               7: "SYSTEM_COMMUNICATION", 8: "INCOMPATIBLE_BINARIES", 9: "LOADING_BINARIES",
               10: "RESOURCE_UNAVAILABLE", 11: "SYSTEM_COMMUNICATION_FATAL", 100: "GENERAL"},
    "BACKEND": {0: "CANNOT_INITIALIZE", 2: "TERMINATE_FAILED", 3: "NOT_SUPPORTED",
                4: "INVALID_ARGUMENT", 5: "OP_PACKAGE_NOT_FOUND",
                6: "OP_PACKAGE_IF_PROVIDER_NOT_FOUND", 7: "OP_PACKAGE_REGISTRATION_FAILED",
                8: "OP_PACKAGE_UNSUPPORTED_VERSION", 9: "OP_PACKAGE_DUPLICATE",
                10: "INCONSISTENT_CONFIG", 11: "INVALID_HANDLE", 12: "INVALID_CONFIG"},
    "CONTEXT": {0: "INVALID_ARGUMENT", 1: "CTX_DOES_NOT_EXIST", 2: "INVALID_HANDLE",
                3: "NOT_FINALIZED", 4: "BINARY_VERSION", 5: "CREATE_FROM_BINARY",
                6: "GET_BINARY_SIZE_FAILED", 7: "GET_BINARY_FAILED", 8: "BINARY_CONFIGURATION",
                9: "SET_PROFILE", 10: "INVALID_CONFIG", 11: "BINARY_SUBOPTIMAL", 12: "ABORTED",
                13: "TIMED_OUT", 14: "INCREMENT_INVALID_BUFFER"},
    "GRAPH": {0: "INVALID_ARGUMENT", 1: "INVALID_HANDLE", 2: "GRAPH_DOES_NOT_EXIST",
              3: "INVALID_NAME", 4: "INVALID_TENSOR", 5: "INVALID_OP_CONFIG", 6: "SET_PROFILE",
              7: "UNCONNECTED_NODE", 20: "CREATE_FAILED", 21: "OPTIMIZATION_FAILED",
              22: "FINALIZE_FAILED", 23: "GRAPH_NOT_FINALIZED", 24: "GRAPH_FINALIZED",
              25: "EXECUTION_ASYNC_FIFO_FULL", 30: "SIGNAL_IN_USE", 31: "ABORTED",
              32: "PROFILE_IN_USE", 33: "TIMED_OUT", 34: "SUBGRAPH", 35: "DISABLED",
              36: "DYNAMIC_TENSOR_SHAPE", 37: "TENSOR_SPARSITY", 38: "EARLY_TERMINATION",
              39: "INVALID_CONTEXT"},
    "TENSOR": {1: "INVALID_HANDLE", 2: "DOES_NOT_EXIST", 3: "ALREADY_EXISTS",
               4: "INVALID_TENSOR_PARAM", 5: "UNSUPPORTED_TENSOR_PARAM", 6: "NAME_HASH_COLLISION",
               7: "INCOMPATIBLE_TENSOR_UPDATE"},
    "MEM": {0: "INVALID_ARGUMENT", 1: "INVALID_HANDLE", 2: "ALREADY_REGISTERED", 3: "MAPPING",
            4: "INVALID_SHAPE", 5: "UNSUPPORTED_MEMTYPE"},
    "LOG": {2: "INITIALIZATION", 3: "INVALID_ARGUMENT", 4: "INVALID_HANDLE"},
    "PROFILE": {0: "INVALID_HANDLE", 1: "HANDLE_IN_USE", 2: "INCOMPATIBLE_EVENT"},
    "DEVICE": {0: "INVALID_HANDLE", 1: "INVALID_CONFIG", 2: "HARDWARE_UNAVAILABLE",
               3: "ASSOCIATED_TO_CONTEXT"},
    "SYSTEM": {0: "INVALID_HANDLE", 1: "INVALID_ARGUMENT"},
}

ERROR_NAMES: dict[int, str] = {
    _BASES[group] + off: f"QNN_{group}_ERROR_{name}"
    for group, table in _OFFSETS.items() for off, name in table.items()
}

NOT_SUPPORTED = 1000
MEM_ALLOC = 1002
SYSTEM_COMMUNICATION = 1007        # the DSP restarted (SSR) and QNN recovered: handles made before are stale
SYSTEM_COMMUNICATION_FATAL = 1011  # the DSP restarted and QNN could not recover the session
GENERAL = 1100                     # e.g. "Dma execution failed on the skel side. result = 1100"


def code_of(handle: int) -> int:
    """The error code inside a 64-bit Qnn_ErrorHandle_t (its low 16 bits)."""
    return int(handle) & 0xFFFF


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"QNN_ERROR_{code}")
