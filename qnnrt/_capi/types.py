"""ctypes mirrors of the QNN C structs we use (LP64: x86_64 / aarch64), and the enums beside them.

Layouts follow the public QNN headers (core API 2.x, system API 1.x, HTP API 5.x); `tests/test_abi.py`
pins every size and offset the 2.51 libraries accept. Versioned structs (tensor v1/v2, binary info
v1..v3, graph info v1..v3) are unions tagged by a leading `version`, exactly as in C.
"""
from __future__ import annotations

import ctypes as C
import enum
import logging
from typing import Any, Literal

from qnnrt.errors import QnnrtError

u8, u32, i32, u64, i64 = C.c_uint8, C.c_uint32, C.c_int32, C.c_uint64, C.c_int64
vp = C.c_void_p
P = C.POINTER
ErrorHandle = C.c_uint64  # Qnn_ErrorHandle_t is uint64_t; the code is its low 16 bits
# (name, ctypes type) lists shared by versioned structs; typeshed's own field-type alias is private
Fields = list[tuple[str, Any]]

# ---------------------------------------------------------------------------------------- enums
DATA_TYPES = {
    "INT_8": 0x0008, "INT_16": 0x0016, "INT_32": 0x0032, "INT_64": 0x0064,
    "UINT_8": 0x0108, "UINT_16": 0x0116, "UINT_32": 0x0132, "UINT_64": 0x0164,
    "FLOAT_16": 0x0216, "BFLOAT_16": 0x0226, "FLOAT_32": 0x0232, "FLOAT_64": 0x0264,
    "SFIXED_POINT_4": 0x0304, "SFIXED_POINT_8": 0x0308, "SFIXED_POINT_16": 0x0316,
    "SFIXED_POINT_32": 0x0332, "UFIXED_POINT_4": 0x0404, "UFIXED_POINT_8": 0x0408,
    "UFIXED_POINT_16": 0x0416, "UFIXED_POINT_32": 0x0432, "BOOL_8": 0x0508, "STRING": 0x0608,
    "UNDEFINED": 0x7FFFFFFF,
}
DATA_TYPE_NAMES = {v: k for k, v in DATA_TYPES.items()}
# numpy dtype name per QNN data type (fixed point: the storage integer type)
DATA_TYPE_NUMPY = {
    0x0008: "int8", 0x0016: "int16", 0x0032: "int32", 0x0064: "int64",
    0x0108: "uint8", 0x0116: "uint16", 0x0132: "uint32", 0x0164: "uint64",
    0x0216: "float16", 0x0232: "float32", 0x0264: "float64",
    0x0308: "int8", 0x0316: "int16", 0x0332: "int32",
    0x0408: "uint8", 0x0416: "uint16", 0x0432: "uint32", 0x0508: "bool",
}
FIXED_POINT_TYPES = {0x0308, 0x0316, 0x0332, 0x0408, 0x0416, 0x0432}

TENSOR_TYPES = {0: "APP_WRITE", 1: "APP_READ", 2: "APP_READWRITE", 3: "NATIVE", 4: "STATIC",
                5: "NULL", 6: "UPDATEABLE_STATIC", 7: "UPDATEABLE_NATIVE", 8: "UPDATEABLE_APP_WRITE",
                9: "UPDATEABLE_APP_READ", 10: "UPDATEABLE_APP_READWRITE", 11: "OPTIONAL_APP_WRITE",
                12: "OPTIONAL_APP_READ", 13: "OPTIONAL_APP_READWRITE"}
TENSORMEMTYPE_RAW = 0
TENSORMEMTYPE_MEMHANDLE = 1

DEFINITION_DEFINED = 1
UNDEFINED_ENUM = 0x7FFFFFFF
QUANT_ENCODINGS = {0: "SCALE_OFFSET", 1: "AXIS_SCALE_OFFSET", 2: "BW_SCALE_OFFSET",
                   3: "BW_AXIS_SCALE_OFFSET", 4: "BLOCK", 5: "BLOCKWISE_EXPANSION", 6: "VECTOR",
                   7: "FLOAT_BLOCK", 8: "BW_AXIS_SCALE_OFFSET_MAPPED", 9: "BW_BLOCK_MAPPED",
                   10: "BW_BLOCKWISE_EXPANSION_MAPPED", 11: "BW_FLOAT_BLOCK",
                   UNDEFINED_ENUM: "UNDEFINED"}
QUANT_SCALE_OFFSET, QUANT_AXIS_SCALE_OFFSET, QUANT_BW_SCALE_OFFSET = 0, 1, 2

LogLevelName = Literal["error", "warn", "info", "verbose", "debug"]


class LogLevel(enum.IntEnum):
    """QnnLog_Level_t. The one log-level table: users write the lower-case name, QNN gets the
    number, Python's `logging` the level of `python_level`."""
    ERROR = 1
    WARN = 2
    INFO = 3
    VERBOSE = 4
    DEBUG = 5

    @classmethod
    def parse(cls, level: LogLevel | str) -> LogLevel:
        """The level named `level` (case-insensitive); an unknown name is a QnnrtError."""
        if isinstance(level, LogLevel):
            return level
        try:
            return cls[str(level).strip().upper()]
        except KeyError:
            raise QnnrtError(f"unknown log level {level!r}; use {', '.join(LOG_LEVEL_NAMES)}") from None

    @property
    def python_level(self) -> int:
        """The `logging` level QNN lines of this level are forwarded at (verbose and debug: DEBUG)."""
        return {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}.get(self.value, logging.DEBUG)


LOG_LEVEL_NAMES: tuple[str, ...] = tuple(m.name.lower() for m in LogLevel)

PROFILE_LEVELS = {"basic": 1, "detailed": 2, "backend": 1000}
PROFILE_UNITS = {1: "us", 2: "bytes", 3: "cycles", 4: "count", 5: "object", 6: "none",
                 1000: "backend"}

CONTEXT_CONFIG_OPTION_CUSTOM = 0
DEVICE_CONFIG_OPTION_CUSTOM = 0
HTP_CONTEXT_OPTION_REGISTER_MULTI_CONTEXTS = 2
HTP_CONTEXT_OPTION_DSP_MEMORY_PROFILING = 4
HTP_DEVICE_OPTION_SOC, HTP_DEVICE_OPTION_ARCH, HTP_DEVICE_OPTION_SIGNED_PD = 0, 1, 2


# -------------------------------------------------------------------------------------- structs
class Version(C.Structure):
    _fields_ = [("major", u32), ("minor", u32), ("patch", u32)]

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


class ApiVersion(C.Structure):
    _fields_ = [("coreApiVersion", Version), ("backendApiVersion", Version)]


class ScaleOffset(C.Structure):
    _fields_ = [("scale", C.c_float), ("offset", i32)]


class AxisScaleOffset(C.Structure):
    _fields_ = [("axis", i32), ("numScaleOffsets", u32), ("scaleOffset", P(ScaleOffset))]


class BwScaleOffset(C.Structure):
    _fields_ = [("bitwidth", u32), ("scale", C.c_float), ("offset", i32)]


class BwAxisScaleOffset(C.Structure):
    _fields_ = [("bitwidth", u32), ("axis", i32), ("numElements", u32),
                ("scales", P(C.c_float)), ("offsets", P(i32))]


class _QuantizeUnion(C.Union):
    # the largest members (bwAxisScaleOffset, block encodings) are 32 bytes
    _fields_ = [("scaleOffsetEncoding", ScaleOffset), ("axisScaleOffsetEncoding", AxisScaleOffset),
                ("bwScaleOffsetEncoding", BwScaleOffset),
                ("bwAxisScaleOffsetEncoding", BwAxisScaleOffset), ("raw", u64 * 4)]


class QuantizeParams(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("encodingDefinition", u32), ("quantizationEncoding", u32), ("u", _QuantizeUnion)]


class ClientBuffer(C.Structure):
    _fields_ = [("data", vp), ("dataSize", u32)]


class _TensorDataUnion(C.Union):
    _fields_ = [("clientBuf", ClientBuffer), ("memHandle", vp), ("retrieveRaw", vp)]


_TENSOR_V1_FIELDS: Fields = [("id", u32), ("name", C.c_char_p), ("type", u32), ("dataFormat", u32),
                     ("dataType", u32), ("quantizeParams", QuantizeParams), ("rank", u32),
                     ("dimensions", P(u32)), ("memType", u32), ("d", _TensorDataUnion)]


class TensorV1(C.Structure):
    _anonymous_ = ("d",)
    _fields_ = _TENSOR_V1_FIELDS


class SparseParams(C.Structure):
    # type + union { hybridCoo {numSpecifiedElements, numSparseDimensions} }
    _fields_ = [("type", u32), ("numSpecifiedElements", u32), ("numSparseDimensions", u32)]


class TensorV2(C.Structure):
    _anonymous_ = ("d",)
    _fields_ = _TENSOR_V1_FIELDS + [("isDynamicDimensions", P(u8)), ("sparseParams", SparseParams),
                                    ("isProduced", u8)]


class _TensorUnion(C.Union):
    _fields_ = [("v1", TensorV1), ("v2", TensorV2)]


class Tensor(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", u32), ("u", _TensorUnion)]

    @property
    def body(self) -> TensorV1 | TensorV2:
        """The versioned body; v1 fields sit at the same offsets in v2."""
        return self.v2 if self.version == 2 else self.v1


class _ScalarUnion(C.Union):
    _fields_ = [("floatValue", C.c_float), ("doubleValue", C.c_double), ("uint64Value", u64),
                ("int64Value", i64), ("uint32Value", u32), ("int32Value", i32),
                ("uint8Value", u8), ("bool8Value", u8), ("stringValue", C.c_char_p)]


class Scalar(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("dataType", u32), ("u", _ScalarUnion)]


# ---- config structs: "option + union", passed as NULL-terminated arrays of pointers
class _ContextConfigUnion(C.Union):
    _fields_ = [("customConfig", vp), ("priority", u32), ("oemString", C.c_char_p),
                ("asyncExeQueueDepth", vp), ("isPersistentBinary", u8), ("ptr", vp)]


class ContextConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _ContextConfigUnion)]


class HtpGroupRegistration(C.Structure):
    """QnnHtpContext_GroupRegistration_t: the group's first context (NULL for the first one) and
    the spill-fill buffer size the group shares."""
    _fields_ = [("firstGroupHandle", vp), ("maxSpillFillBuffer", u64)]


class _HtpContextCustomUnion(C.Union):
    _fields_ = [("boolValue", C.c_bool), ("u64Value", u64),
                ("groupRegistration", HtpGroupRegistration)]


class HtpContextCustomConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _HtpContextCustomUnion)]


class _DeviceConfigUnion(C.Union):
    _fields_ = [("customConfig", vp), ("hardwareInfo", vp)]


class DeviceConfig(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _DeviceConfigUnion)]


class HtpDeviceArch(C.Structure):
    _fields_ = [("deviceId", u32), ("arch", u32)]


class HtpDeviceSignedPd(C.Structure):
    """QnnHtpDevice_UseSignedProcessDomain_t: run the device's session in a signed PD."""
    _fields_ = [("deviceId", u32), ("useSignedProcessDomain", C.c_bool)]


class _HtpDeviceCustomUnionV1(C.Union):
    _fields_ = [("socModel", u32), ("arch", HtpDeviceArch), ("signedPd", HtpDeviceSignedPd)]


class HtpDeviceCustomConfigV1(C.Structure):
    """HTP API <= 5.43: the union holds only 4-byte-aligned members and sits at offset 4."""
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _HtpDeviceCustomUnionV1)]


class _HtpDeviceCustomUnionV2(C.Union):
    _fields_ = [("socModel", u32), ("arch", HtpDeviceArch), ("signedPd", HtpDeviceSignedPd),
                ("htpExtension", vp)]


class HtpDeviceCustomConfigV2(C.Structure):
    """Newer HTP APIs (5.51 seen): a pointer joined the union, which moved it to offset 8."""
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _HtpDeviceCustomUnionV2)]


# ---- memory registration (QnnMem.h): shared buffers handed to QNN by file descriptor
MEM_TYPE_ION = 1
MEM_TYPE_CUSTOM = 2
MEM_TYPE_DMA_BUF = 3
HTP_MEM_SHARED_BUFFER = 1      # QnnHtpMem_Type_t: one fd, several tensors at offsets in it


class MemShape(C.Structure):
    _fields_ = [("numDim", u32), ("dimSize", P(u32)), ("shapeConfig", C.c_char_p)]


class MemDmaBufInfo(C.Structure):
    _fields_ = [("fd", i32), ("data", vp)]


class _MemInfoUnion(C.Union):
    _fields_ = [("ionFd", i32), ("customInfo", vp), ("dmaBufInfo", MemDmaBufInfo)]


class MemDescriptor(C.Structure):
    """Qnn_MemDescriptor_t: shape, data type, memory type, then ION fd / custom / DMA-BUF info."""
    _anonymous_ = ("u",)
    _fields_ = [("memShape", MemShape), ("dataType", u32), ("memType", u32), ("u", _MemInfoUnion)]


class HtpSharedBufferConfig(C.Structure):
    """QnnHtpMem_SharedBufferConfig_t: the allocation's fd and the tensor's offset in it."""
    _fields_ = [("fd", i32), ("offset", u64)]


class _HtpMemUnion(C.Union):
    _fields_ = [("qurtAddress", u32), ("sharedBufferConfig", HtpSharedBufferConfig)]


class HtpMemDescriptor(C.Structure):
    """QnnMemHtp_Descriptor_t (HTP/QnnHtpMem.h), a MemDescriptor's customInfo for MEM_TYPE_CUSTOM:
    memory type, the allocation's total size, then the shared-buffer config."""
    _anonymous_ = ("u",)
    _fields_ = [("type", u32), ("size", u64), ("u", _HtpMemUnion)]



# ---- platform info (QnnDevice.h QnnDevice_PlatformInfo_t; HTP/QnnHtpDevice.h device info extension)
class CoreInfoV1(C.Structure):
    _fields_ = [("coreId", u32), ("coreType", u32), ("coreInfoExtension", vp)]


class CoreInfo(C.Structure):
    _fields_ = [("version", u32), ("v1", CoreInfoV1)]


class HtpOnChipDeviceInfoExtension(C.Structure):
    """QnnHtpDevice_OnChipDeviceInfoExtension_t: VTCM size (MB), SoC model, signed PD, DLBC, arch."""
    _fields_ = [("vtcmSize", C.c_size_t), ("socModel", u32), ("signedPdSupport", C.c_bool),
                ("dlbcSupport", C.c_bool), ("arch", u32)]


class HtpDeviceInfoExtension(C.Structure):
    """QnnHtpDevice_DeviceInfoExtension_t: device type, then a union whose only member is on-chip."""
    _fields_ = [("devType", u32), ("onChipDevice", HtpOnChipDeviceInfoExtension)]


class HardwareDeviceInfoV1(C.Structure):
    _fields_ = [("deviceId", u32), ("deviceType", u32), ("numCores", u32), ("cores", P(CoreInfo)),
                ("deviceInfoExtension", P(HtpDeviceInfoExtension))]


class HardwareDeviceInfo(C.Structure):
    _fields_ = [("version", u32), ("v1", HardwareDeviceInfoV1)]


class PlatformInfoV1(C.Structure):
    _fields_ = [("numHwDevices", u32), ("hwDevices", P(HardwareDeviceInfo))]


class PlatformInfo(C.Structure):
    _fields_ = [("version", u32), ("v1", PlatformInfoV1)]


# ---- profile
class ProfileEventData(C.Structure):
    _fields_ = [("type", u32), ("unit", u32), ("value", u64), ("identifier", C.c_char_p)]


class _ProfileExtendedValueUnion(C.Union):
    _fields_ = [("value", Scalar), ("opaque", u64 * 3)]


class ProfileExtendedEventDataV1(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("type", u32), ("unit", u32), ("u", _ProfileExtendedValueUnion),
                ("timestamp", u64), ("identifier", C.c_char_p)]


class ProfileExtendedEventData(C.Structure):
    _fields_ = [("version", u32), ("v1", ProfileExtendedEventDataV1)]


# ---- system context: binary info
_GRAPH_INFO_V1_FIELDS: Fields = [("graphName", C.c_char_p), ("numGraphInputs", u32),
                         ("graphInputs", P(Tensor)), ("numGraphOutputs", u32),
                         ("graphOutputs", P(Tensor))]
_GRAPH_INFO_V2_FIELDS: Fields = _GRAPH_INFO_V1_FIELDS + [("numUpdateableTensors", u32),
                                                 ("updateableTensors", P(Tensor))]


class GraphInfoV1(C.Structure):
    _fields_ = _GRAPH_INFO_V1_FIELDS


class GraphInfoV2(C.Structure):
    _fields_ = _GRAPH_INFO_V2_FIELDS


class GraphInfoV3(C.Structure):
    _fields_ = _GRAPH_INFO_V2_FIELDS + [("graphBlobInfoSize", u32), ("graphBlobInfo", vp),
                                        ("startOpIndex", u32), ("endOpIndex", u32)]


class HtpGraphBlobInfoV1(C.Structure):
    """QnnHtpSystemContext_GraphBlobInfo_t, version 1 (40 bytes): the head of a v3 graph info's
    graphBlobInfo for HTP binaries."""
    _fields_ = [("version", u32), ("spillFillBufferSize", u64), ("vtcmSize", u32),
                ("optimizationLevel", u32), ("htpDlbc", C.c_uint8), ("numHvxThreads", u64)]


class HtpGraphBlobInfoV2(C.Structure):
    """QnnHtpSystemContext_GraphBlobInfoV2_t (72 bytes), right after the v1 struct in the blob
    (QNN 2.43+; measured on 2.51, where graphBlobInfoSize is 112)."""
    _fields_ = [("version", u32), ("nativeKChannelSize", u64), ("nativeVChannelSize", u64),
                ("isSafeShareIO", u32), ("ioTensorSize", u64), ("opDataSize", u64),
                ("constSize", u64), ("ddrTensorSize", u64), ("sharedWeightsSize", u64)]


HTP_BLOB_INFO_V1_SIZE = C.sizeof(HtpGraphBlobInfoV1)
HTP_BLOB_INFO_V2_SIZE = C.sizeof(HtpGraphBlobInfoV2)
assert HTP_BLOB_INFO_V1_SIZE == 40 and HTP_BLOB_INFO_V2_SIZE == 72


class _GraphInfoUnion(C.Union):
    _fields_ = [("graphInfoV1", GraphInfoV1), ("graphInfoV2", GraphInfoV2),
                ("graphInfoV3", GraphInfoV3)]


class GraphInfo(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", u32), ("u", _GraphInfoUnion)]

    @property
    def body(self) -> GraphInfoV1:
        return {1: self.graphInfoV1, 2: self.graphInfoV2, 3: self.graphInfoV3}[self.version]


_BINARY_INFO_V1_FIELDS: Fields = [("backendId", u32), ("buildId", C.c_char_p),
                          ("coreApiVersion", Version), ("backendApiVersion", Version),
                          ("socVersion", C.c_char_p), ("hwInfoBlobVersion", Version),
                          ("contextBlobVersion", Version), ("hwInfoBlobSize", u32),
                          ("hwInfoBlob", vp), ("contextBlobSize", u64),
                          ("numContextTensors", u32), ("contextTensors", P(Tensor)),
                          ("numGraphs", u32), ("graphs", P(GraphInfo))]


class BinaryInfoV1(C.Structure):
    _fields_ = _BINARY_INFO_V1_FIELDS


class BinaryInfoV2(C.Structure):
    _fields_ = _BINARY_INFO_V1_FIELDS + [("platformInfo", vp)]


class BinaryInfoV3(C.Structure):
    _fields_ = [("backendId", u32), ("buildId", C.c_char_p), ("coreApiVersion", Version),
                ("backendApiVersion", Version), ("socVersion", C.c_char_p),
                ("contextBlobVersion", Version), ("contextBlobSize", u64),
                ("numContextTensors", u32), ("contextTensors", P(Tensor)),
                ("numGraphs", u32), ("graphs", P(GraphInfo)), ("platformInfo", vp),
                ("contextMetadataSize", u32), ("contextMetadata", vp), ("socModel", u32)]


class _BinaryInfoUnion(C.Union):
    _fields_ = [("v1", BinaryInfoV1), ("v2", BinaryInfoV2), ("v3", BinaryInfoV3)]


class BinaryInfo(C.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("version", u32), ("u", _BinaryInfoUnion)]

    @property
    def body(self) -> BinaryInfoV1 | BinaryInfoV2 | BinaryInfoV3:
        return {1: self.v1, 2: self.v2, 3: self.v3}[self.version]


def null_terminated(structs: list) -> C.Array | None:
    """`const X**` config argument: a NULL-terminated array of pointers to `structs` (kept alive
    by the caller)."""
    if not structs:
        return None
    return (vp * (len(structs) + 1))(*[C.addressof(s) for s in structs], None)


