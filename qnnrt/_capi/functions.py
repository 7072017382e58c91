"""The QNN provider function tables: slot names in ABI order and the C signature of each slot we call.

QnnInterface and QnnSystemInterface are append-only tables of function pointers; a library of a newer
minor API has more slots after these, an older one fewer (those we then refuse by name).
"""
from __future__ import annotations

import ctypes as C
from collections.abc import Callable, Sequence
from typing import Any

from qnnrt._capi.types import (ApiVersion, BinaryInfo, ErrorHandle, PlatformInfo, ProfileEventData,
                               ProfileExtendedEventData, Tensor, Version, P, u32, u64, vp)
from qnnrt.errors import QnnrtError

INTERFACE_SLOTS = """propertyHasCapability backendCreate backendSetConfig backendGetApiVersion
backendGetBuildId backendRegisterOpPackage backendGetSupportedOperations backendValidateOpConfig
backendFree contextCreate contextSetConfig contextGetBinarySize contextGetBinary
contextCreateFromBinary contextFree graphCreate graphCreateSubgraph graphSetConfig graphAddNode
graphFinalize graphRetrieve graphExecute graphExecuteAsync tensorCreateContextTensor
tensorCreateGraphTensor logCreate logSetLogLevel logFree profileCreate profileSetConfig
profileGetEvents profileGetSubEvents profileGetEventData profileGetExtendedEventData profileFree
memRegister memDeRegister deviceGetPlatformInfo deviceFreePlatformInfo deviceGetInfrastructure
deviceCreate deviceSetConfig deviceGetInfo deviceFree signalCreate signalSetConfig signalTrigger
signalFree errorGetMessage errorGetVerboseMessage errorFreeVerboseMessage
graphPrepareExecutionEnvironment graphReleaseExecutionEnvironment graphGetProperty
contextValidateBinary contextCreateFromBinaryWithSignal contextCreateFromBinaryListAsync
tensorUpdateGraphTensors tensorUpdateContextTensors contextGetBinarySectionSize
contextGetBinarySection contextApplyBinarySection backendGetProperty contextGetProperty
contextGetIncrementalBinary contextReleaseIncrementalBinary contextFinalize globalConfigSet
contextCreateFromBinaryWithCallback contextGetBinarySectionUpdate
contextFreeBinarySectionUpdate""".split()

SYSTEM_SLOTS = """systemContextCreate systemContextGetBinaryInfo systemContextGetMetaData
systemContextFree systemTensorGetMemoryFootprint systemLogCreate systemLogSetLogLevel
systemLogFree systemDlcCreateFromFile systemDlcCreateFromBinary systemDlcComposeGraphs
systemDlcGetOpMappings systemDlcFree systemProfileCreateSerializationTarget
systemProfileSerializeEventData systemProfileFreeSerializationTarget""".split()

# void (*QnnLog_Callback_t)(const char* fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args)
# va_list is passed as a pointer on x86_64 (and to a struct on aarch64, also by pointer).
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_char_p, u32, u64, vp)

INTERFACE_SIGNATURES: dict[str, tuple] = {
    "backendCreate": (vp, P(vp), P(vp)),
    "backendGetApiVersion": (P(ApiVersion),),
    "backendGetBuildId": (P(C.c_char_p),),
    "backendFree": (vp,),
    "contextCreateFromBinary": (vp, vp, P(vp), vp, u64, P(vp), vp),
    "contextFree": (vp, vp),
    "graphRetrieve": (vp, C.c_char_p, P(vp)),
    "graphExecute": (vp, P(Tensor), u32, P(Tensor), u32, vp, vp),
    "logCreate": (LOG_CALLBACK, u32, P(vp)),
    "logSetLogLevel": (vp, u32),
    "logFree": (vp,),
    "profileCreate": (vp, u32, P(vp)),
    "profileGetEvents": (vp, P(P(u64)), P(u32)),
    "profileGetSubEvents": (u64, P(P(u64)), P(u32)),
    "profileGetEventData": (u64, P(ProfileEventData)),
    "profileGetExtendedEventData": (u64, P(ProfileExtendedEventData)),
    "profileFree": (vp,),
    "deviceCreate": (vp, P(vp), P(vp)),
    "deviceGetPlatformInfo": (vp, P(P(PlatformInfo))),
    "deviceFreePlatformInfo": (vp, P(PlatformInfo)),
    "deviceFree": (vp,),
    "errorGetMessage": (ErrorHandle, P(C.c_char_p)),
}

SYSTEM_SIGNATURES: dict[str, tuple] = {
    "systemContextCreate": (P(vp),),
    "systemContextGetBinaryInfo": (vp, vp, u64, P(P(BinaryInfo)), P(u64)),
    "systemContextFree": (vp,),
}


class InterfaceProvider(C.Structure):
    """QnnInterface_t: backend id, provider name, API versions, then the function table."""
    _fields_ = [("backendId", u32), ("providerName", C.c_char_p), ("apiVersion", ApiVersion),
                ("functions", vp * len(INTERFACE_SLOTS))]


class SystemInterfaceProvider(C.Structure):
    """QnnSystemInterface_t: backend id, provider name, system API version, function table."""
    _fields_ = [("backendId", u32), ("providerName", C.c_char_p), ("systemApiVersion", Version),
                ("functions", vp * len(SYSTEM_SLOTS))]


# -------------------------------------------------------------------- the tables, declared for mypy
# What the declared calls accept: handles are c_void_p (or None for "no handle"); out-parameters and
# arrays are ctypes pointers or byref(...) objects, which typeshed does not name publicly.
Handle = C.c_void_p | int | None
Ref = Any
Rc = int  # Qnn_ErrorHandle_t: 0 is success, the low 16 bits are the error code


class FunctionTable:
    """Callables for the slots of one provider table; each call returns the raw error handle.

    Subclasses declare the slots qnnrt calls (one annotation per entry of their signature table,
    checked by tests/abi), so every QNN call is type-checked. A slot the library leaves NULL is a
    callable raising QnnrtError; `has(name)` tells them apart."""
    SIGNATURES: dict[str, tuple[Any, ...]] = {}

    def __init__(self, slots: Sequence[str], pointers: Sequence[int | None], what: str) -> None:
        self._present: set[str] = set()
        for name, argtypes in self.SIGNATURES.items():
            addr = pointers[slots.index(name)]
            if addr:
                # CFUNCTYPE (not PYFUNCTYPE): the GIL is released during the call
                setattr(self, name, C.CFUNCTYPE(ErrorHandle, *argtypes)(addr))
                self._present.add(name)
            else:
                setattr(self, name, _missing(what, name))

    def has(self, name: str) -> bool:
        return name in self._present


def _missing(what: str, name: str) -> Callable[..., Rc]:
    def call(*args: object) -> Rc:
        raise QnnrtError(f"{what} does not provide {name} (the function pointer is NULL)")
    return call


class QnnInterface(FunctionTable):
    """The QnnInterface_t functions qnnrt calls."""
    SIGNATURES = INTERFACE_SIGNATURES
    backendCreate: Callable[[Handle, Ref, Ref], Rc]
    backendGetApiVersion: Callable[[Ref], Rc]
    backendGetBuildId: Callable[[Ref], Rc]
    backendFree: Callable[[Handle], Rc]
    contextCreateFromBinary: Callable[[Handle, Handle, Ref, Handle, int, Ref, Handle], Rc]
    contextFree: Callable[[Handle, Handle], Rc]
    graphRetrieve: Callable[[Handle, bytes, Ref], Rc]
    graphExecute: Callable[[Handle, Ref, int, Ref, int, Handle, Handle], Rc]
    logCreate: Callable[[Any, int, Ref], Rc]
    logSetLogLevel: Callable[[Handle, int], Rc]
    logFree: Callable[[Handle], Rc]
    profileCreate: Callable[[Handle, int, Ref], Rc]
    profileGetEvents: Callable[[Handle, Ref, Ref], Rc]
    profileGetSubEvents: Callable[[int, Ref, Ref], Rc]
    profileGetEventData: Callable[[int, Ref], Rc]
    profileGetExtendedEventData: Callable[[int, Ref], Rc]
    profileFree: Callable[[Handle], Rc]
    deviceCreate: Callable[[Handle, Ref, Ref], Rc]
    deviceGetPlatformInfo: Callable[[Handle, Ref], Rc]
    deviceFreePlatformInfo: Callable[[Handle, Ref], Rc]
    deviceFree: Callable[[Handle], Rc]
    errorGetMessage: Callable[[int, Ref], Rc]


class QnnSystemInterface(FunctionTable):
    """The QnnSystemInterface_t functions qnnrt calls."""
    SIGNATURES = SYSTEM_SIGNATURES
    systemContextCreate: Callable[[Ref], Rc]
    systemContextGetBinaryInfo: Callable[[Handle, Handle, int, Ref, Ref], Rc]
    systemContextFree: Callable[[Handle], Rc]
