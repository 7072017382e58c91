"""HTP performance policy: which mode to vote, whose choice it was, and what each mode asks for.

The mode table follows the two public QNN runtimes, so a file votes the same under qnnrt as under the
runtime that wrote it:
- ExecuTorch (backends/qualcomm/runtime/backends/htp/HtpDevice.cpp, `SetVotePowerConfig`,
  `SetRpcPollingPowerConfig`, release 1.5): every up vote has DCVS off and the performance power
  mode; sleep latency 40 us (burst), 100 us (sustained / high performance), 1000 us (the rest); bus
  and core corners MAX (burst), TURBO (sustained / high performance), NOM_PLUS (balanced), NOM
  (low balanced), SVS_PLUS (high power saver), SVS (power saver), SVS2 (low power saver). Then one
  setPowerConfig with RPC control latency 100 us and RPC polling time 9999 us for burst / sustained /
  high performance, 0 for the others. The down vote at release: DCVS on, power-saver power mode,
  sleep latency 2000 us, corners SVS2.
- ONNX Runtime's QNN EP (onnxruntime/core/providers/qnn/builder/qnn_backend_manager.cc,
  `SetHtpPowerConfig`) has the same corners and latencies; it differs in turning DCVS on for
  balanced and below, and adds `extreme_power_saver` (DCVS on, power-saver mode, corners DISABLE,
  1000 us), which ExecuTorch does not have: that one row is ONNX Runtime's.
`default` makes no vote at all (both runtimes skip the perf infrastructure then).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

from qnnrt.core.backend import Backend
from qnnrt.core.perf import Dcvs, PowerVote, VotePlan
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.core.spill_fill import CONFIG_NOT_SUPPORTED, SpillFillGroup
from qnnrt.errors import QnnrtError

# voltage corners and power modes by name (values: HTP/QnnHtpPerfInfrastructure.h)
_CORNER = {"DISABLE": 0x10, "SVS2": 0x30, "SVS": 0x40, "SVS_PLUS": 0x50, "NOM": 0x60,
           "NOM_PLUS": 0x70, "TURBO": 0x80, "MAX": 0xA0}
_POWER_SAVER, _PERFORMANCE = 0x4, 0x10

RPC_CONTROL_LATENCY_US = 100        # ExecuTorch's kRpcControlLatency
RPC_POLLING_HIGH_POWER_US = 9999    # ExecuTorch's kRpcPollingTimeHighPower (= QNN's maximum)
MAX_RPC_POLLING_TIME_US = 9999


@dataclass(frozen=True)
class Mode:
    """One performance mode: its up vote and its RPC polling time."""
    sleep_latency_us: int
    corner: str
    rpc_polling_time_us: int
    dcvs_enable: int = 0
    power_mode: int = _PERFORMANCE

    def up(self) -> Dcvs:
        c = _CORNER[self.corner]
        return Dcvs(dcvs_enable=self.dcvs_enable, power_mode=self.power_mode,
                    sleep_latency_us=self.sleep_latency_us, bus_corner=c, core_corner=c)


MODES: dict[str, Mode | None] = {
    "default": None,
    "burst": Mode(40, "MAX", RPC_POLLING_HIGH_POWER_US),
    "sustained_high_performance": Mode(100, "TURBO", RPC_POLLING_HIGH_POWER_US),
    "high_performance": Mode(100, "TURBO", RPC_POLLING_HIGH_POWER_US),
    "balanced": Mode(1000, "NOM_PLUS", 0),
    "low_balanced": Mode(1000, "NOM", 0),
    "high_power_saver": Mode(1000, "SVS_PLUS", 0),
    "power_saver": Mode(1000, "SVS", 0),
    "low_power_saver": Mode(1000, "SVS2", 0),
    "extreme_power_saver": Mode(1000, "DISABLE", 0, dcvs_enable=1, power_mode=_POWER_SAVER),
}
DOWN_VOTE = Dcvs(dcvs_enable=1, power_mode=_POWER_SAVER, sleep_latency_us=2000,
                 bus_corner=_CORNER["SVS2"], core_corner=_CORNER["SVS2"])


def check_mode(mode: str, where: str = "performance mode") -> str:
    """`mode` normalised (dashes allowed), or a QnnrtError listing the modes."""
    m = mode.strip().lower().replace("-", "_")
    if m not in MODES:
        raise QnnrtError(f"unknown {where} {mode!r}; use one of {', '.join(MODES)}")
    return m


def check_rpc(value: int | None, what: str, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QnnrtError(f"{what} must be a whole number of microseconds >= 0, not {value!r}")
    if maximum is not None and value > maximum:
        raise QnnrtError(f"{what} {value} us is over QNN's maximum of {maximum} us")
    return value


@dataclass(frozen=True)
class Choice:
    """The mode to vote and whose choice it was: 'option' (LoadOptions / --htp-performance-mode),
    'file' (the .pte's compile spec or program.json), 'command default' (qnnrt llm: burst),
    or 'none' (nobody asked: default, no vote)."""
    mode: str
    source: str
    rpc_control_latency_us: int | None = None
    rpc_polling_time_us: int | None = None

    def plan(self) -> VotePlan | None:
        """The votes this choice makes; None for `default` (no vote at all)."""
        m = MODES[self.mode]
        if m is None:
            return None
        latency = (self.rpc_control_latency_us if self.rpc_control_latency_us is not None
                   else RPC_CONTROL_LATENCY_US)
        polling = (self.rpc_polling_time_us if self.rpc_polling_time_us is not None
                   else m.rpc_polling_time_us)
        return VotePlan(m.up(), DOWN_VOTE, latency, polling)


def choose(option: str | None, from_file: str | None, command_default: str | None = None,
           rpc_control_latency_us: int | None = None,
           rpc_polling_time_us: int | None = None) -> Choice:
    """The user's option wins, then the file, then the command's default, else `default`."""
    latency = check_rpc(rpc_control_latency_us, "RPC control latency")
    polling = check_rpc(rpc_polling_time_us, "RPC polling time", MAX_RPC_POLLING_TIME_US)
    for value, source in ((option, "option"), (from_file, "file"),
                          (command_default, "command default")):
        if value is not None:
            return Choice(check_mode(value), source, latency, polling)
    return Choice("default", "none", latency, polling)


@dataclass
class Feature:
    """An optimization asked for (by the file or an option) and whether it is on, and why not."""
    asked: bool = False
    on: bool = False
    why: str = ""
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"asked": self.asked, "on": self.on, "why": self.why, **self.detail}


class Performance:
    """A program's performance state: the choice, the live vote, and the optimizations' status.
    `override(mode)` votes another mode for a block of runs and restores the previous one."""

    def __init__(self, choice: Choice, backend: Backend | None = None):
        self.choice = choice
        self.vote: PowerVote | None = None
        self.unavailable = ""
        self.shared_buffers = Feature()
        self.shared_memory: SharedMemory | None = None   # the program's rpcmem, when on
        self.spill_fill_group = Feature()
        self.group: SpillFillGroup | None = None   # the group contexts are created with, if any
        self.backend_signed_pd = bool(getattr(backend, "signed_pd", False))
        # other processes holding the program's contexts (PD workers): told every new vote
        self.followers: list[Callable[[Choice], None]] = []
        self.current = choice   # what is voted now: the choice, or a per-run override of it
        if backend is not None:
            self.start(backend)

    def start(self, backend: Backend) -> None:
        plan = self.choice.plan()
        if plan is None:
            return
        self.vote = PowerVote(backend, plan)
        self.unavailable = self.vote.unavailable

    @contextlib.contextmanager
    def override(self, mode: str) -> Iterator[None]:
        """Vote `mode` for the runs inside the block (a per-run override, as ONNX Runtime's run
        option), then vote the program's own mode again. Needs a live vote: a program opened with
        `default` has no power config id, so the override opens none either; say so."""
        m = check_mode(mode)
        if self.vote is None or not self.vote.active:
            raise QnnrtError(f"cannot override the performance mode with {m!r}: this program makes "
                             f"no vote ({self.choice.mode}{'; ' + self.unavailable if self.unavailable else ''}); "
                             f"load it with LoadOptions(performance_mode=...) instead")
        previous = self.current
        try:
            self._vote_everywhere(Choice(m, "override", self.choice.rpc_control_latency_us,
                                         self.choice.rpc_polling_time_us))
            yield
        finally:
            self._vote_everywhere(previous)

    def _vote_everywhere(self, choice: Choice) -> None:
        """Vote `choice` here, then in every follower (PD workers)."""
        self.revote(choice)
        for follow in self.followers:
            follow(choice)

    def revote(self, choice: Choice) -> None:
        """Vote `choice` on this process's id (an override, or a PD worker following its main
        process)."""
        self.current = choice
        if self.vote is None or not self.vote.active:
            return
        plan = choice.plan()
        self.vote.vote(plan if plan is not None else VotePlan(DOWN_VOTE, DOWN_VOTE))

    def vote_counts(self) -> dict:
        """How this process's perf-infrastructure calls went (a PD worker's report)."""
        calls = self.vote.calls if self.vote else []
        return {"mode": self.current.mode, "calls": len(calls),
                "accepted": sum(c.accepted for c in calls), "unavailable": self.unavailable or None,
                "active": bool(self.vote and self.vote.active)}

    def no_shared_memory(self, why: str) -> None:
        """Shared buffers asked for cannot be used by this program after all: off, with why."""
        memory, self.shared_memory = self.shared_memory, None
        if memory is not None:
            memory.close()
            f = self.shared_buffers
            f.on, f.why = False, why

    def _fold_shared(self) -> None:
        """How registration went (refused or not, counts) into the feature."""
        f, memory = self.shared_buffers, self.shared_memory
        if memory is None:
            return
        f.detail.update(memory.counts(), library=memory.library)
        if memory.refused:
            f.on, f.why = False, memory.refused

    def _fold_group(self) -> None:
        """What the spill-fill group met at context creation (refused or not) into the feature."""
        f, group = self.spill_fill_group, self.group
        if group is None:
            return
        f.detail["group"] = group.to_json()
        if group.refused:
            f.on, f.why = False, group.refused

    def notes(self) -> list[str]:
        """One line per optimization that was asked for and is off (said once, in the summary)."""
        self._fold_group()
        self._fold_shared()
        out = []
        ch = self.choice
        if ch.plan() is None and (ch.rpc_control_latency_us is not None or ch.rpc_polling_time_us is not None):
            out.append("RPC settings given but not sent: performance mode default makes no vote")
        if self.unavailable:
            out.append(f"performance vote {self.choice.mode!r} not made: {self.unavailable}")
        refused = [c for c in (self.vote.calls if self.vote else []) if not c.accepted]
        for c in refused:
            out.append(f"the backend refused {c.function} ({c.what}): {c.as_dict()['error']}")
        for name, f in (("shared buffers", self.shared_buffers),
                        ("spill-fill group", self.spill_fill_group)):
            if f.asked and not f.on:
                out.append(f"{name} asked for but off: {f.why}")
        return out

    def to_json(self) -> dict:
        c = self.choice
        plan = c.plan()
        self._fold_shared()
        return {
            "mode": c.mode, "source": c.source,
            "rpc_control_latency_us": plan.rpc_control_latency_us if plan else None,
            "rpc_polling_time_us": plan.rpc_polling_time_us if plan else None,
            "power_config_id": self.vote.power_config_id if self.vote else None,
            "pd_session": "signed" if self.backend_signed_pd else "unsigned",
            "votes": self.vote.report() if self.vote else [],
            "vote_unavailable": self.unavailable or None,
            "shared_buffers": self.shared_buffers.to_json(),
            "spill_fill_group": self.spill_fill_group.to_json(),
            "notes": self.notes(),
            "summary": self.summary_line(),
        }

    def summary_line(self) -> str:
        """The run summary's line: mode, whose choice, how the accelerator answered."""
        c = self.choice
        if c.mode == "default":
            head = f"performance mode default ({_SOURCE_TEXT[c.source]}): no vote"
        elif self.vote is None or self.unavailable:
            head = f"performance mode {c.mode} ({_SOURCE_TEXT[c.source]}): not voted ({self.unavailable})"
        else:
            calls = self.vote.calls
            ok = sum(x.accepted for x in calls)
            plan = c.plan()
            assert plan is not None
            head = (f"performance mode {c.mode} ({_SOURCE_TEXT[c.source]}): {ok}/{len(calls)} "
                    f"perf-infrastructure calls accepted, RPC control latency "
                    f"{plan.rpc_control_latency_us} us, polling {plan.rpc_polling_time_us} us")
        self._fold_shared()
        sb = "on" if self.shared_buffers.on else "off"
        sf = "on" if self.spill_fill_group.on else "off"
        return f"{head}; shared buffers {sb}, spill-fill group {sf}"


_SOURCE_TEXT = {"option": "your choice", "file": "the file's choice",
                "command default": "this command's default", "none": "nobody asked",
                "override": "override"}


MULTI_PD_NO_SHARED_BUFFERS = ("not with multi-PD residency: graph calls in PD workers read the "
                              "shared arena, not rpcmem, so this program's graph I/O stays in "
                              "raw buffers")
SIMULATOR_REFUSES_GROUPS = (f"the x86 simulator refuses REGISTER_MULTI_CONTEXTS (QNN error "
                            f"{CONFIG_NOT_SUPPORTED}); contexts are created without a group")


def describe_optimizations(perf: Performance, runtime: dict, shared_buffer: bool | None,
                           backend: Backend) -> SpillFillGroup | None:
    """Decide shared buffers and the spill-fill group from what the file asks (`runtime`: the .pte's
    compile spec), the user's option and what this backend offers; record on / off and why in
    `perf`. Returns the group to create contexts with (None: no group)."""
    sb = perf.shared_buffers
    sb.asked = bool(runtime.get("shared_buffer")) if shared_buffer is None else shared_buffer
    if sb.asked:
        ok, why = SharedMemory.available()
        if ok:
            perf.shared_memory = SharedMemory(backend)
        sb.on, sb.why = ok, why
    sf = perf.spill_fill_group
    size = runtime.get("max_sf_buf_size") or 0
    if isinstance(size, list):
        size = max(size)
    sf.asked = bool(runtime.get("use_multi_contexts")) and size > 0   # ExecuTorch's condition
    if not sf.asked:
        return None
    sf.detail["max_spill_fill_bytes"] = size
    if backend.lib.is_simulator:
        sf.why = SIMULATOR_REFUSES_GROUPS
        return None
    sf.on = True
    perf.group = SpillFillGroup(size)
    return perf.group
