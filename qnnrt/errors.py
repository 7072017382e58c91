"""One exception hierarchy for everything qnnrt raises on purpose.

`QnnrtError` is what a user catches; the CLI turns it into a message and exit status 1.
Subclasses say which part of the input was wrong, so callers can react without parsing text.
"""
from __future__ import annotations

# what a user can do about the QNN error codes whose cause we know
PD_EXHAUSTION_REMEDY = (
    "the accelerator's protection-domain (PD) address space is exhausted: too many contexts (or "
    "too large ones) are alive at once. Keep fewer contexts live: run with the default "
    "residency 'auto' (it evicts and retries), or 'sequential' / 'bounded:K'; free contexts you no "
    "longer need; or compile larger partitions into fewer context binaries.")

_REMEDIES = {
    1002: "an allocation failed in the QNN backend; free contexts you no longer need, or run "
    "with residency 'auto', 'bounded:K' or 'sequential' to keep fewer contexts live.",
    1000: "the backend does not support this feature here (some features, e.g. DSP "
    "memory profiling, exist on devices only).",
    1008: "the binary was built for another QNN/SoC version; rebuild it for this backend.",
    5004: "the context binary's version is not supported by this QNN library; rebuild it with a "
          "matching QNN SDK.",
    5005: "the file is not a valid QNN context binary for this backend (corrupt, truncated, or "
          "built for another backend); rebuild it.",
    6002: "no graph of that name is in the context; `qnnrt inspect` lists the graphs.",
    14001: "the device config was rejected; check --soc / the SoC model number.",
}


def remedy_for(code: int, log_tail: list[str]) -> str:
    if code == 1002 and any("available PD" in line for line in log_tail):
        return PD_EXHAUSTION_REMEDY
    return _REMEDIES.get(code, "")


class QnnrtError(Exception):
    """Base of every error qnnrt raises for bad input or a failed QNN call."""


class LibraryNotFoundError(QnnrtError):
    """A QNN shared library could not be found or loaded."""


class FormatError(QnnrtError):
    """A file (context binary, program, EPContext model, .pte) is malformed or unsupported."""


class InputError(QnnrtError, ValueError):
    """Inputs given to a graph, a method or the LLM runner are not what it takes (a ValueError
    too, for callers that catch bad values generally)."""


class BuildError(QnnrtError):
    """Partitioning or compiling a model failed."""


class KernelError(QnnrtError):
    """A CPU kernel of an ExecuTorch program got arguments it cannot run (names the op)."""


class QnnError(QnnrtError):
    """A QNN C API call returned an error.

    Carries the function, the numeric code and its name, the backend's last log lines, and a remedy
    for codes whose cause we know (e.g. 1002 with "Failed to find available PD" = PD exhaustion).
    """

    def __init__(self, function: str, code: int, code_name: str = "", message: str = "",
                 log_tail: list[str] | None = None, remedy: str = "", context: str = ""):
        self.function = function
        self.code = int(code)
        self.code_name = code_name
        self.message = message
        self.log_tail = list(log_tail or [])
        self.remedy = remedy
        self.context = context
        super().__init__(self._format())

    @property
    def is_pd_exhaustion(self) -> bool:
        """True when the failure is the accelerator's protection-domain address space running out."""
        return self.code == 1002 and any("available PD" in line for line in self.log_tail)

    @property
    def is_not_supported(self) -> bool:
        """QNN_COMMON_ERROR_NOT_SUPPORTED: the backend lacks the feature (e.g. device-only ones)."""
        return self.code == 1000

    @property
    def is_out_of_memory(self) -> bool:
        return self.code == 1002 or self.is_pd_exhaustion

    def _format(self) -> str:
        head = f"{self.function} failed with QNN error {self.code}"
        if self.code_name:
            head += f" ({self.code_name})"
        if self.context:
            head += f" {self.context}"
        parts = [head + (f": {self.message}" if self.message else "")]
        if self.log_tail:
            parts.append("QNN log:\n" + "\n".join("  " + line for line in self.log_tail))
        if self.remedy:
            parts.append("What to do: " + self.remedy)
        return "\n".join(parts)


class RecoveryError(QnnError):
    """A graph call failed with an error a device can raise transiently, and re-creating what it
    ran on did not make it succeed (or the run's recovery budget was used up): `recoveries` says how
    many re-creations this call was given."""

    def __init__(self, error: QnnError, recoveries: int, remedy: str, context: str):
        self.recoveries = recoveries
        super().__init__(error.function, error.code, error.code_name, error.message, error.log_tail,
                         remedy, context)
