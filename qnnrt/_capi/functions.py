"""The QNN provider function tables: slot names in ABI order and the C signature of each slot we call.

QnnInterface and QnnSystemInterface are append-only tables of function pointers; a library of a newer
minor API has more slots after these, an older one fewer (those we then refuse by name).
"""
from __future__ import annotations

import ctypes as C

from qnnrt._capi.types import (ApiVersion, BinaryInfo, ErrorHandle, MemDescriptor, PlatformInfo,
                               ProfileEventData,
                               ProfileExtendedEventData, Tensor, Version, P, u32, u64, vp)

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
    "deviceGetInfrastructure": (P(vp),),
    "memRegister": (vp, P(MemDescriptor), u32, P(vp)),
    "memDeRegister": (P(vp), u32),
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
