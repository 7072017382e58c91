"""`qnnrt convert`'s options, checked when made (each error says the option and what to give)."""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from qnnrt.convert.sizing import PART_BUDGET, PD_LIMIT, Sizing
from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.units import format_bytes

PRECISIONS = ("fp16", "w8a16", "w4a16")
SHARING = ("auto", "on", "off")
DEFAULT_CONTEXT = 2048
DEFAULT_PROMPT_AR = 128


@dataclass(frozen=True)
class ConvertOptions:
    """What to convert to. ``context`` / ``prompt_ar`` None: the defaults (2048 and 128, at most the
    model's max positions); ``parts`` "auto" or a count; ``part_budget``: bytes of predicted PD need
    each auto part stays under (default convert/sizing.py's PART_BUDGET, at most one PD);
    ``tokenizer``: a tokenizer.json to use
    (a GGUF whose tokenizer cannot be rebuilt); ``cache_dir``: the compile cache (default qnnrt's)."""
    soc: str | int | None = None
    precision: str = "fp16"
    context: int | None = None
    prompt_ar: int | None = None
    parts: str | int = "auto"
    part_budget: int | None = None
    calibration: Path | None = None
    weight_sharing: str = "auto"
    tokenizer: Path | None = None
    cache_dir: Path | None = None
    progress: bool | None = None
    lora_rank: int | None = None             # LoRA adapter inputs of this rank (convert/lora.py)
    lora_targets: tuple[str, ...] = ()       # ... on these projections (q_proj, v_proj, ...)

    def __post_init__(self) -> None:
        from qnnrt.convert.lora import check_lora_options
        check_lora_options(self.lora_rank, tuple(self.lora_targets), self.precision)
        if self.precision not in PRECISIONS:
            raise ConvertError(f"--precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if self.weight_sharing not in SHARING:
            raise ConvertError(f"--weight-sharing {self.weight_sharing!r}: choose one of {', '.join(SHARING)}")
        if not (self.parts == "auto" or (isinstance(self.parts, int) and not isinstance(self.parts, bool)
                                         and self.parts >= 1)):
            raise ConvertError(f"--parts {self.parts!r}: give 'auto' or a positive number")
        self._check_part_budget()
        for name in ("context", "prompt_ar"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConvertError(f"--{name.replace('_', '-')} {v!r}: give a positive number")
        if self.calibration is not None and not Path(self.calibration).is_file():
            raise ConvertError(f"--calibration {self.calibration}: no such file (give a UTF-8 text file)")
        if self.calibration is not None and self.precision == "fp16":
            raise ConvertError("--calibration applies to a quantized --precision (w8a16, w4a16); fp16 needs none")

    def _check_part_budget(self) -> None:
        b = self.part_budget
        if b is None:
            return
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ConvertError(f"--part-budget {b!r}: give a positive size in bytes (e.g. 512MiB)")
        if self.parts != "auto":
            raise ConvertError(f"--part-budget sizes --parts auto; drop it or --parts {self.parts}")
        if b > PD_LIMIT:
            raise ConvertError(f"--part-budget {format_bytes(b)} is past one PD ({format_bytes(PD_LIMIT)}): a part's "
                               f"context must fit in one; give at most {PD_LIMIT // 2**20}MiB")

    def sizing(self) -> Sizing:
        """The Sizing auto parts are planned against (convert/sizing.py)."""
        return Sizing(self.part_budget if self.part_budget is not None else PART_BUDGET,
                      inline=self.precision != "fp16", strict=self.part_budget is not None)

    def context_for(self, spec: ModelSpec) -> int:
        """The context length, checked against what the model was trained for."""
        ctx = self.context if self.context is not None else min(DEFAULT_CONTEXT, spec.max_positions)
        if ctx > spec.max_positions:
            raise ConvertError(f"--context {ctx} is past the model's max_position_embeddings "
                               f"{spec.max_positions}; give at most {spec.max_positions}")
        if ctx < 2:
            raise ConvertError(f"--context {ctx}: give at least 2")
        return ctx

    def prompt_ar_for(self, context: int) -> int:
        ar = self.prompt_ar if self.prompt_ar is not None else min(DEFAULT_PROMPT_AR, context // 2)
        if ar >= context:
            raise ConvertError(f"--prompt-ar {ar} must be below --context {context} (the graphs keep "
                               f"context - prompt-ar cache slots)")
        return max(ar, 2) if context > 2 else 1

    def sharing_on_host(self) -> tuple[bool, str]:
        """(weight sharing, why) for this host: the x86 HTP simulator cannot load weight-shared binaries."""
        simulator = platform.machine().lower() in ("x86_64", "amd64")
        if self.weight_sharing == "on":
            return True, ("on as asked" + ("; this x86 host's HTP simulator cannot load weight-shared "
                                           "binaries, run the bundle on a device" if simulator else ""))
        if self.weight_sharing == "off":
            return False, "off as asked"
        if simulator:
            return False, "off: the x86 HTP simulator cannot load weight-shared binaries (auto)"
        return True, "on (auto)"
