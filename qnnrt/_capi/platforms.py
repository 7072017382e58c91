"""Where the QNN libraries are on each OS: pure functions of the host (OS, process and hardware
architecture, environment, filesystem root), so tests lay out folders in a temp dir instead of
patching anything.

Facts this encodes (QNN SDK 2.x layout, onnxruntime-qnn 2.7 wheels):
- Names: `libQnnHtp.so` / `libQnnSystem.so` on Linux and Android, `QnnHtp.dll` / `QnnSystem.dll` on
  Windows. HTP skels (the part that runs on the Hexagon NPU) are `libQnnHtpV<arch>Skel.so` on every
  OS; on Windows each needs its signed catalog `libqnnhtpv<arch>.cat` in the same folder.
- SDK: `$QNN_SDK_ROOT/lib/<target>/` holds the CPU-side libraries, `$QNN_SDK_ROOT/lib/hexagon-v<arch>/
  unsigned/` the skels (and, for Windows, the .cat files).
  Targets: x86_64-linux-clang (simulator), aarch64-oe-linux-gcc<ver> (Yocto/QC Linux),
  aarch64-ubuntu-gcc<ver>, aarch64-android, aarch64-windows-msvc (ARM64 processes),
  arm64x-windows-msvc (x64/ARM64EC processes on Windows on Snapdragon), x86_64-windows-msvc.
- onnxruntime-qnn: Linux x86_64 and win_arm64 wheels keep the libraries in the package folder;
  the win_amd64 wheel has `libs/amd64/` (x64 machines) and `libs/arm64ec/` (x64 Python on an ARM64
  machine, with the V68/V73/V81 skels and .cat files).
- The DSP loader (FastRPC) finds skels through ADSP_LIBRARY_PATH: `;`-separated folders.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping

LINUX_X86 = "x86_64-linux-clang"
ANDROID = "aarch64-android"
WIN_ARM64 = "aarch64-windows-msvc"
WIN_ARM64X = "arm64x-windows-msvc"
WIN_X64 = "x86_64-windows-msvc"
# used when QNN_SDK_ROOT/lib cannot be listed (or to order the known ones): newest gcc first
KNOWN_OE_LINUX = ("aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc9.3", "aarch64-oe-linux-gcc8.2")
KNOWN_UBUNTU = ("aarch64-ubuntu-gcc9.4",)
# where device images keep the skels the DSP loader falls back on (SNPE/QNN docs: the last three
# must stay in ADSP_LIBRARY_PATH on Android and most embedded Linux; /usr/lib/rfsa/adsp on QCS Linux)
SYSTEM_SKEL_DIRS = ("/usr/lib/rfsa/adsp", "/vendor/lib/rfsa/adsp", "/system/lib/rfsa/adsp",
                    "/system/vendor/lib/rfsa/adsp", "/dsp")


def normalize_machine(m: str) -> str:
    m = (m or "").strip().lower()
    if m in ("x86_64", "amd64", "x64", "em64t"):
        return "x86_64"
    if m in ("aarch64", "arm64", "arm64ec", "armv8", "armv8l", "aarch64_be"):
        return "aarch64"
    return m


@dataclass(frozen=True)
class Host:
    """What library discovery depends on. `machine` is the architecture of this process (which
    libraries it can load), `native_machine` that of the hardware (an x64 Python on Windows on
    Snapdragon has x86_64 / aarch64). `root` is where absolute paths (/etc/os-release, /vendor,
    /usr/lib/rfsa/adsp) are looked up."""
    os: str                      # "linux" | "android" | "windows" | "darwin" | ...
    machine: str
    native_machine: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    root: Path = Path("/")

    def __post_init__(self) -> None:
        object.__setattr__(self, "os", self.os.lower())
        object.__setattr__(self, "machine", normalize_machine(self.machine))
        object.__setattr__(self, "native_machine",
                           normalize_machine(self.native_machine) or self.machine)
        object.__setattr__(self, "root", Path(self.root))

    def path(self, absolute: str) -> Path:
        """An absolute device path (/vendor/...) inside this host's root."""
        return self.root / absolute.lstrip("/")

    @property
    def windows(self) -> bool:
        return self.os == "windows"


def _windows_native_machine() -> str:
    """The hardware architecture on Windows, also from an emulated x64 process (IsWow64Process2,
    Windows 10 1709+); '' when unknown. Only called on Windows."""
    try:
        import ctypes
        from ctypes import wintypes
        k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        fn = k32.IsWow64Process2
        fn.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.USHORT), ctypes.POINTER(wintypes.USHORT)]
        fn.restype = wintypes.BOOL
        proc, native = wintypes.USHORT(), wintypes.USHORT()
        if fn(k32.GetCurrentProcess(), ctypes.byref(proc), ctypes.byref(native)):
            return {0xAA64: "aarch64", 0x8664: "x86_64", 0x014C: "x86"}.get(native.value, "")
    except (OSError, AttributeError, ImportError):
        pass
    return ""


def detect_host(env: Mapping[str, str] | None = None) -> Host:
    """The Host of this process (the only function here that looks at the machine)."""
    import platform
    import sysconfig
    env = dict(os.environ if env is None else env)
    if sys.platform == "win32":
        plat = sysconfig.get_platform()  # the interpreter's own: win-amd64 / win-arm64 / win32
        machine = {"win-amd64": "x86_64", "win-arm64": "aarch64", "win32": "x86"}.get(plat, platform.machine())
        native = _windows_native_machine() or env.get("PROCESSOR_ARCHITEW6432") or platform.machine()
        return Host("windows", machine, native, env)
    osname = "linux" if sys.platform.startswith("linux") else sys.platform
    if sys.platform == "android" or "ANDROID_ROOT" in env or os.path.exists("/system/build.prop"):
        osname = "android"
    m = platform.machine()
    return Host(osname, m, m, env)


def library_names(host: Host) -> tuple[str, str]:
    """(backend, system) library file names."""
    return ("QnnHtp.dll", "QnnSystem.dll") if host.windows else ("libQnnHtp.so", "libQnnSystem.so")


CDSPRPC_ENV = "QNNRT_CDSPRPC_LIB"


def cdsprpc_candidates(host: Host) -> list[tuple[str, str]]:
    """What to dlopen for rpcmem, each with its reason: `QNNRT_CDSPRPC_LIB` (the library, or its
    folder) and only it when set, as an explicit path is never a fallback; else the names the
    DSP user space installs (Android /vendor/lib64, Linux boards /usr/lib, Windows cdsprpc.dll),
    found by the system loader."""
    names = ("cdsprpc.dll", "libcdsprpc.dll") if host.windows else ("libcdsprpc.so",)
    explicit = host.env.get(CDSPRPC_ENV, "").strip()
    if explicit:
        p = Path(explicit)
        return [(str(p / names[0] if p.is_dir() else p), CDSPRPC_ENV)]
    return [(n, "system library path") for n in names]


def skel_names(host: Host, arch: int) -> list[str]:
    """Files the HTP of Hexagon arch `arch` needs from the skel folder (the .cat on Windows)."""
    names = [f"libQnnHtpV{arch}Skel.so"]
    if host.windows:
        names.append(f"libqnnhtpv{arch}.cat")
    return names


def _gcc_key(name: str) -> tuple:
    m = re.search(r"gcc(\d+)(?:\.(\d+))?", name)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def _prefers_ubuntu(host: Host) -> bool:
    try:
        text = host.path("/etc/os-release").read_text(errors="replace").lower()
    except OSError:
        return False
    ids = " ".join(re.findall(r"^(?:id|id_like)=\"?([^\"\n]*)", text, re.M))
    return any(w in ids.split() for w in ("ubuntu", "debian"))


def sdk_targets(host: Host, sdk_root: str | os.PathLike | None = None) -> list[str]:
    """`lib/<target>` folder names of a QNN SDK whose libraries this process can load, best first.
    On Linux aarch64 the folders present in `sdk_root/lib` decide (oe-linux-gcc* for Yocto / QC
    Linux, ubuntu-gcc* first on Ubuntu/Debian), newest gcc first."""
    if host.windows:
        if host.machine == "aarch64":
            return [WIN_ARM64, WIN_ARM64X]
        if host.machine == "x86_64":
            # x64 Python on Windows on Snapdragon: ARM64X libraries drive the NPU; x86_64-windows-msvc
            # is the simulator
            return [WIN_ARM64X, WIN_X64] if host.native_machine == "aarch64" else [WIN_X64]
        return []
    if host.machine == "x86_64":
        return [LINUX_X86] if host.os == "linux" else []
    if host.machine != "aarch64" or host.os not in ("linux", "android"):
        return []
    if host.os == "android":
        return [ANDROID]
    oe, ubuntu = list(KNOWN_OE_LINUX), list(KNOWN_UBUNTU)
    if sdk_root:
        try:
            present = [p.name for p in (Path(sdk_root) / "lib").iterdir() if p.is_dir()]
        except OSError:
            present = []
        oe = sorted({n for n in present if n.startswith("aarch64-oe-linux-gcc")} | set(oe),
                    key=_gcc_key, reverse=True)
        ubuntu = sorted({n for n in present if n.startswith("aarch64-ubuntu-gcc")} | set(ubuntu),
                        key=_gcc_key, reverse=True)
    return ubuntu + oe if _prefers_ubuntu(host) else oe + ubuntu


def ort_qnn_dirs(host: Host, package_dir: str | os.PathLike) -> list[tuple[str, Path]]:
    """Folders of the onnxruntime_qnn package that hold QNN libraries for this process (the same
    choice as the package's own platform_loader), each with its reason."""
    pkg = Path(package_dir)
    out = []
    if host.windows and host.machine == "x86_64":
        sub = "arm64ec" if host.native_machine == "aarch64" else "amd64"
        out.append((f"onnxruntime_qnn package (libs/{sub})", pkg / "libs" / sub))
    out.append(("onnxruntime_qnn package", pkg))
    return out


def find_ort_qnn_package() -> Path | None:
    """The installed onnxruntime_qnn package folder, without importing it (its import edits PATH)."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("onnxruntime_qnn")
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent if spec and spec.origin else None


def candidate_dirs(host: Host, ort_qnn_dir: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """Where libraries are looked for when no path is given, in order, each with its reason:
    QNN_SDK_ROOT/lib/<target> for each fitting target, then the onnxruntime_qnn package."""
    out: list[tuple[str, Path]] = []
    root = host.env.get("QNN_SDK_ROOT")
    if root:
        for t in sdk_targets(host, root):
            out.append((f"QNN_SDK_ROOT ({t})", Path(root) / "lib" / t))
    if ort_qnn_dir:
        out.extend(ort_qnn_dirs(host, ort_qnn_dir))
    return out


@dataclass
class Found:
    path: Path | None
    why: str
    looked: list[str]


def find_library(host: Host, name: str, explicit: str | os.PathLike | None = None,
                 ort_qnn_dir: str | os.PathLike | None = None) -> Found:
    """Where library `name` is. An explicit path (a file, or a folder holding `name`) is the only
    place looked at when given: a wrong explicit path is never a fallback. Never raises."""
    backend = library_names(host)[0]
    if explicit:
        p = Path(explicit)
        if p.is_file() and (name == backend or p.name == name):
            return Found(p, "explicit path", [str(p)])
        folder = p if p.is_dir() else p.parent
        q = folder / name
        return Found(q if q.is_file() else None, "explicit path", [str(p if p.suffix else q)])
    looked = []
    for why, d in candidate_dirs(host, ort_qnn_dir):
        q = d / name
        looked.append(f"{q} ({why})")
        if q.is_file():
            return Found(q, why, looked)
    return Found(None, "", looked)


def what_to_do(host: Host) -> str:
    """The advice when no library was found, for this OS."""
    b = library_names(host)[0]
    if host.windows:
        return (f"`pip install onnxruntime-qnn` (ships {b} and the HTP skels), set QNN_SDK_ROOT to a "
                f"QNN SDK (lib/{sdk_targets(host)[0] if sdk_targets(host) else WIN_X64}), or pass "
                f"--backend-lib C:\\path\\to\\{b}.")
    if host.os == "linux" and host.machine == "x86_64":
        return (f"`pip install onnxruntime-qnn` (ships the x86_64 QNN libraries), set QNN_SDK_ROOT to a "
                f"QNN SDK, or pass --backend-lib /path/to/{b}.")
    targets = ", ".join(sdk_targets(host)) or "a target for this machine"
    return (f"set QNN_SDK_ROOT to a QNN SDK with lib/<target> for this machine ({targets}); "
            f"onnxruntime-qnn has no wheel here. Or pass --backend-lib /path/to/{b}.")


def not_found_message(host: Host, name: str, found: Found) -> str:
    if found.why == "explicit path":
        return (f"cannot find {name} at the explicit path {found.looked[0]}. What to do: pass the path "
                f"of {library_names(host)[0]} (with {library_names(host)[1]} beside it), or leave "
                f"--backend-lib out to use QNN_SDK_ROOT or the onnxruntime-qnn package.")
    where = "\n".join("  " + x for x in found.looked) or \
        "  (nowhere: QNN_SDK_ROOT is not set and onnxruntime_qnn is not installed)"
    return f"cannot find {name}. Looked in:\n{where}\nWhat to do: {what_to_do(host)}"


def is_device_backend(host: Host, backend_path: str | os.PathLike) -> bool:
    """Does this backend library drive a real NPU (needs skels and the DSP loader), rather than
    being the x86_64 simulator? Decided by the hardware and the folder the library is in."""
    if host.native_machine != "aarch64":
        return False
    parts = {p.lower() for p in Path(backend_path).parts}
    return not ({LINUX_X86, WIN_X64, "amd64"} & parts)


# ---- HTP skels and ADSP_LIBRARY_PATH -------------------------------------------------------

def sdk_root_of(backend_dir: str | os.PathLike) -> Path | None:
    """The SDK root when `backend_dir` is a QNN SDK's lib/<target> folder."""
    d = Path(backend_dir)
    return d.parent.parent if d.parent.name == "lib" else None


def skel_dirs(host: Host, backend_dir: str | os.PathLike | None, arch: int | None = None
              ) -> list[tuple[str, Path]]:
    """Where the HTP skels are looked for, in order: ADSP_LIBRARY_PATH (if set), beside the backend
    library (onnxruntime-qnn wheels, flat deployments), the SDK's hexagon-v<arch>/unsigned, then
    the device image's own folders (Linux / Android)."""
    out: list[tuple[str, Path]] = []
    for part in host.env.get("ADSP_LIBRARY_PATH", "").split(";"):
        if part.strip():
            out.append(("ADSP_LIBRARY_PATH", Path(part.strip())))
    if backend_dir:
        out.append(("beside the backend library", Path(backend_dir)))
    roots = [r for r in (host.env.get("QNN_SDK_ROOT"), backend_dir and sdk_root_of(backend_dir)) if r]
    for r in dict.fromkeys(Path(x) for x in roots):
        lib = r / "lib"
        if arch is not None:
            out.append((f"SDK hexagon-v{arch}", lib / f"hexagon-v{arch}" / "unsigned"))
        else:
            try:
                hx = sorted((p for p in lib.glob("hexagon-v*") if p.is_dir()), key=lambda p: p.name)
            except OSError:
                hx = []
            out.extend((f"SDK {p.name}", p / "unsigned") for p in hx)
    if not host.windows:
        out.extend(("device image", host.path(d)) for d in SYSTEM_SKEL_DIRS)
    seen, uniq = set(), []
    for why, p in out:
        if p not in seen:
            seen.add(p)
            uniq.append((why, p))
    return uniq


_SKEL_RE = re.compile(r"^libQnnHtpV(\d+)Skel\.so$")


def available_skels(host: Host, backend_dir: str | os.PathLike | None) -> dict[int, Path]:
    """Hexagon arch -> the first skel found for it (used to report what is there before the
    device's arch is known)."""
    found: dict[int, Path] = {}
    for _, d in skel_dirs(host, backend_dir):
        try:
            entries = sorted(d.iterdir())
        except OSError:
            continue
        for p in entries:
            m = _SKEL_RE.match(p.name)
            if m and int(m.group(1)) not in found and p.is_file():
                found[int(m.group(1))] = p
    return found


@dataclass
class SkelCheck:
    arch: int
    path: Path | None            # the skel, or None
    looked: list[str]
    missing_cat: Path | None = None   # Windows: the skel is there but its .cat is not

    @property
    def ok(self) -> bool:
        return self.path is not None and self.missing_cat is None

    def message(self, host: Host) -> str:
        if self.ok:
            return f"libQnnHtpV{self.arch}Skel.so: {self.path}"
        if self.missing_cat is not None:
            return (f"{self.path} has no {self.missing_cat.name} beside it: Windows loads an HTP skel only "
                    f"with its signed catalog in the same folder. What to do: copy {self.missing_cat.name} "
                    f"from the QNN SDK's lib/hexagon-v{self.arch}/unsigned next to the skel.")
        where = "\n".join("  " + x for x in self.looked)
        return (f"this device's HTP is V{self.arch} but libQnnHtpV{self.arch}Skel.so is in none of:\n{where}\n"
                f"What to do: set QNN_SDK_ROOT to a QNN SDK that has lib/hexagon-v{self.arch}/unsigned, copy "
                f"that skel beside {library_names(host)[0]}, or set ADSP_LIBRARY_PATH to its folder.")


def check_skel(host: Host, arch: int, backend_dir: str | os.PathLike | None) -> SkelCheck:
    """Is the skel for Hexagon arch `arch` where the DSP loader will find it?"""
    names = skel_names(host, arch)
    looked = []
    for why, d in skel_dirs(host, backend_dir, arch):
        p = d / names[0]
        looked.append(f"{p} ({why})")
        if p.is_file():
            cat = d / names[1] if len(names) > 1 else None
            return SkelCheck(arch, p, looked, cat if cat is not None and not cat.is_file() else None)
    return SkelCheck(arch, None, looked)


def adsp_library_path(host: Host, skel_dir: str | os.PathLike) -> str | None:
    """The ADSP_LIBRARY_PATH value to set for skels in `skel_dir`, or None when the user set one
    (never overridden). The device image's folders stay in it (the loader needs them on Android)."""
    if "ADSP_LIBRARY_PATH" in host.env:
        return None
    parts = [str(skel_dir)]
    if not host.windows:
        parts += list(SYSTEM_SKEL_DIRS)
    return ";".join(dict.fromkeys(parts))


def setup_dsp_environment(host: Host, backend_path: str | os.PathLike, arch: int | None = None,
                          environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ADSP_LIBRARY_PATH (in `environ`, default os.environ, which putenv()s it for the C loader)
    before the backend opens its DSP session, when the backend is a device library and the user has
    not set it. Returns the value set, or None. The skel folder is the one holding the skel for
    `arch` when given, else the first folder with any skel."""
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    if "ADSP_LIBRARY_PATH" in env:
        return None
    bdir = Path(backend_path).parent
    if arch is not None:
        c = check_skel(host, arch, bdir)
        skel_dir = c.path.parent if c.path else None
    else:
        skels = available_skels(host, bdir)
        skel_dir = next(iter(skels.values())).parent if skels else None
    if skel_dir is None:
        return None
    value = adsp_library_path(host, skel_dir)
    if value:
        env["ADSP_LIBRARY_PATH"] = value
    return value
