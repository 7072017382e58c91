"""HeapProfiler bookkeeping, driven with synthetic create/free sequences (no QNN involved)."""
from __future__ import annotations

import gc
import json
import os
import re
import threading

import pytest

from qnnrt._capi.libc import MallInfo
from qnnrt import fileio as fileio_mod
from qnnrt.errors import QnnrtError
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.heap_sources import (DSP_AFTER_EVENT, DSP_BEFORE_EVENT, DspHeapSource, HostHeapSource,
                                          PdEstimateSource)
from qnnrt.fileio import check_output_path, write_atomic
from qnnrt.profiling.pd_log import parse_pd_estimate, pd_estimate_from_log

LINE = re.compile(r"^(DSP|HOST):(before_context_created|after_context_freed) \(bytes\), (\d+)$")


class FakeHost:
    """A 'host' source whose value the test sets, so checkpoints can be asserted exactly."""

    name, primary, supported, note = "host", "heap_in_use", True, "fake"

    def __init__(self) -> None:
        self.value = 1000

    def sample(self) -> dict[str, int]:
        return {"heap_in_use": self.value}


class Ticker:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def read_two_lines(path: str) -> list[tuple[str, str, int]]:
    lines = open(path, encoding="utf-8").read().splitlines()
    assert len(lines) == 2, lines
    out = []
    for line in lines:
        m = LINE.match(line)
        assert m, line
        out.append((m.group(1), m.group(2), int(m.group(3))))
    assert [o[1] for o in out] == ["before_context_created", "after_context_freed"]
    return out


def events(timeline: list[dict], event: str, context: str | None = None) -> list[dict]:
    return [e for e in timeline if e["event"] == event and (context is None or e["context"] == context)]


# ------------------------------------------------------------------------------- the two-line file
def test_two_line_file_on_host_heap_after_ge_before(tmp_path):
    gc.collect()  # garbage of earlier tests must not be freed between the two checkpoints
    prof = HeapProfiler()
    prof.dsp.mark_unsupported("Dsp memory profiling is not supported (QNN error 1000, x86 simulator)")
    held = []
    for name in ("c0", "c1", "c2"):
        prof.before_create(name)
        # what a context leaves behind on the host heap: 5 MiB each, checked at 4, so that a few KiB
        # freed meanwhile by another thread (earlier tests' reapers) cannot fail the check (CI did, by 464 B)
        held.append(bytearray(5 << 20))
        prof.after_create(name, True, 10523136)
    for name in ("c0", "c1", "c2"):
        prof.after_free(name)
    path = str(tmp_path / "heap.txt")
    assert prof.close(path) == path
    (p1, _, before), (p2, _, after) = read_two_lines(path)
    assert p1 == p2 == "HOST"
    assert after >= before
    assert after - before >= 12 << 20
    data = json.load(open(path + ".json"))
    assert data["before_context_created"] == before and data["after_context_freed"] == after
    assert data["ok"] is True and all(c["ok"] is not False for c in data["checks"])
    assert data["checks"][0]["check"].startswith("HOST after_context_freed >= before")
    assert data["timeline"][0]["event"] == "before_first_create"
    assert data["timeline"][0]["live"] == 0
    assert data["timeline"][-1]["event"] == "after_last_free"
    assert {"heap_in_use", "rss"} <= set(data["timeline"][0]["values"]["host"])
    assert data["stats"]["peak_live"] == 3
    del held


def test_lazy_like_sequence_one_create_and_free_per_context(tmp_path):
    prof = HeapProfiler()
    names = [f"ctx{i}" for i in range(6)]
    for it in range(3):            # lazy: create on first use, keep until close
        for n in names:
            if it == 0:
                prof.before_create(n)
                prof.after_create(n, True)
    for n in reversed(names):
        prof.after_free(n)
    prof.close(str(tmp_path / "h.txt"))
    tl = json.load(open(tmp_path / "h.txt.json"))["timeline"]
    for n in names:
        assert len(events(tl, "create", n)) == 1
        assert len(events(tl, "free", n)) == 1
    assert len(events(tl, "before_first_create")) == 1 and len(events(tl, "after_last_free")) == 1
    assert tl[0]["context"] == "ctx0"


def test_bounded_like_sequence_recreates_and_first_last_are_program_wide(tmp_path):
    host = FakeHost()
    prof = HeapProfiler(sources=[host, PdEstimateSource()], clock=Ticker())
    budget, names, live = 2, [f"c{i}" for i in range(5)], []
    host.value = 500                            # before anything exists
    for _ in range(3):
        for n in names:
            if n in live:
                continue
            if len(live) == budget:
                victim = live.pop(0)
                prof.mark("evict", context=victim, reason="budget")
                prof.after_free(victim)
            prof.before_create(n)
            host.value += 100
            prof.after_create(n, True, 1 << 20)
            live.append(n)
    assert prof.live == budget
    for n in live:
        prof.after_free(n)
    host.value = 777                            # after the final free
    prof.mark("after-run note")                 # later marks do not move the checkpoint
    prof.close(str(tmp_path / "h.txt"))
    data = json.load(open(tmp_path / "h.txt.json"))
    tl = data["timeline"]
    for n in names:
        assert len(events(tl, "create", n)) > 1
        assert len(events(tl, "free", n)) == len(events(tl, "create", n))
    assert len(events(tl, "evict")) == data["stats"]["frees"] - budget
    assert data["stats"]["peak_live"] == budget
    assert data["stats"]["first_context"] == "c0"
    assert data["before_context_created"] == 500
    final_free = events(tl, "free")[-1]
    after_entries = events(tl, "after_last_free")
    assert len(after_entries) == 1
    assert tl.index(after_entries[0]) == tl.index(final_free) + 1
    assert data["after_context_freed"] == final_free["values"]["host"]["heap_in_use"]
    assert data["after_time"] == final_free["time"]
    assert max(e["live"] for e in tl) == budget and min(e["live"] for e in tl) == 0
    assert [e["values"]["pd_estimate"]["pd_in_use"] for e in events(tl, "create")][:2] == [1 << 20, 2 << 20]
    assert tl[-1]["event"] == "after-run note"


def test_after_is_the_final_free_when_contexts_are_freed_and_recreated(tmp_path):
    host = FakeHost()
    prof = HeapProfiler(sources=[host], clock=Ticker())
    host.value = 100
    prof.before_create("a"); host.value = 200; prof.after_create("a", True)
    host.value = 150; prof.after_free("a")          # live 0: candidate 150
    prof.before_create("b"); host.value = 300; prof.after_create("b", True)
    host.value = 180; prof.after_free("b")          # live 0 again: final 180
    host.value = 50
    prof.close(str(tmp_path / "h.txt"))
    assert read_two_lines(str(tmp_path / "h.txt")) == [("HOST", "before_context_created", 100),
                                                       ("HOST", "after_context_freed", 180)]
    s = prof.summary()
    assert s["stats"]["last_freed_context"] == "b" and s["delta"] == 80


def test_checkpoints_do_not_depend_on_the_order_of_concurrent_creates(tmp_path):
    results = []
    for order in (["a", "b"], ["b", "a"]):
        host = FakeHost()
        prof = HeapProfiler(sources=[host])
        host.value = 10
        prof.before_create(order[0]); prof.before_create(order[1])    # prefetch thread overlaps
        host.value = 20
        prof.after_create(order[1], True); prof.after_create(order[0], True)
        host.value = 15
        prof.after_free(order[0]); prof.after_free(order[1])
        p = str(tmp_path / f"h{len(results)}.txt")
        prof.close(p)
        results.append(open(p).read())
    assert results[0] == results[1] == ("HOST:before_context_created (bytes), 10\n"
                                         "HOST:after_context_freed (bytes), 15\n")


# ---------------------------------------------------------------------------- failures and misuse
def test_failed_creation_mid_load_rolls_back_and_leaves_zero_live(tmp_path):
    prof = HeapProfiler()
    prof.before_create("c0"); prof.after_create("c0", True, 10 << 20)
    prof.before_create("c1"); prof.after_create("c1", True, 10 << 20)
    prof.before_create("c2"); prof.after_create("c2", False)      # e.g. PD exhausted (1002)
    assert prof.live == 2
    prof.after_free("c1"); prof.after_free("c0")                  # the runtime's error path
    prof.close(str(tmp_path / "h.txt"))
    data = json.load(open(tmp_path / "h.txt.json"))
    st = data["stats"]
    assert (st["live"], st["pending"], st["creates"], st["frees"], st["failed_creates"]) == (0, 0, 2, 2, 1)
    assert prof.live == 0
    assert len(events(data["timeline"], "create_failed", "c2")) == 1
    assert events(data["timeline"], "create_failed")[0]["live"] == 2
    assert {c["check"]: c["ok"] for c in data["checks"]}["live contexts at close == 0"] is True
    assert data["timeline"][-1]["values"]["pd_estimate"]["pd_in_use"] == 0
    read_two_lines(str(tmp_path / "h.txt"))


def test_first_create_failing_still_gives_both_checkpoints(tmp_path):
    prof = HeapProfiler()
    prof.before_create("c0"); prof.after_create("c0", False)
    prof.close(str(tmp_path / "h.txt"))
    read_two_lines(str(tmp_path / "h.txt"))
    s = prof.summary()
    assert s["stats"]["live"] == 0 and s["stats"]["failed_creates"] == 1


def test_frees_never_drive_the_counter_negative():
    prof = HeapProfiler()
    prof.after_free("never-created")
    prof.before_create("a"); prof.after_create("a", True)
    prof.after_free("a"); prof.after_free("a")
    assert prof.live == 0
    s = prof.summary()
    assert s["stats"]["unmatched_frees"] == 2 and s["stats"]["frees"] == 1
    assert all(e["live"] >= 0 for e in prof.timeline())


def test_contexts_still_live_at_close_are_reported(tmp_path):
    prof = HeapProfiler()
    prof.before_create("a"); prof.after_create("a", True)
    prof.close(str(tmp_path / "h.txt"))
    s = prof.summary()
    assert s["ok"] is False
    assert {c["check"]: c["ok"] for c in s["checks"]}["live contexts at close == 0"] is False
    assert any("still live at close" in w for w in s["warnings"])
    read_two_lines(str(tmp_path / "h.txt"))


def test_no_context_at_all_still_writes_both_lines(tmp_path):
    prof = HeapProfiler()
    prof.close(str(tmp_path / "h.txt"))
    read_two_lines(str(tmp_path / "h.txt"))


def test_events_after_close_are_ignored_and_counted(tmp_path):
    prof = HeapProfiler()
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    prof.close()
    n = len(prof.timeline())
    prof.before_create("b"); prof.after_create("b", True); prof.after_free("b"); prof.mark("evict")
    assert len(prof.timeline()) == n
    assert prof.summary()["stats"]["events_after_close"] == 4


def test_marks_keep_the_timeline_json_serializable(tmp_path):
    prof = HeapProfiler(sources=[FakeHost()], clock=lambda: 0.0)    # constant clock: equal entries
    prof.before_create("a"); prof.after_create("a", True)
    prof.mark("evict", context="a", path=tmp_path, victims={"a"}, reason="budget")
    prof.after_free("a")
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    prof.close(str(tmp_path / "h.txt"))
    tl = json.load(open(tmp_path / "h.txt.json"))["timeline"]
    evict = events(tl, "evict")[0]
    assert evict["context"] == "a" and evict["info"] == {"path": str(tmp_path), "victims": ["a"],
                                                         "reason": "budget"}
    assert [e["event"] for e in tl][-2:] == ["free", "after_last_free"]


def test_a_failing_source_does_not_break_the_run():
    class Broken:
        name, supported, note = "broken", True, ""

        def sample(self):
            raise RuntimeError("boom")

    prof = HeapProfiler(sources=[FakeHost(), Broken()])
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    prof.close()
    s = prof.summary()
    assert s["stats"]["sample_errors"] == 3 and "boom" in s["warnings"][0]


# ------------------------------------------------------------------------------------------- DSP
def test_dsp_unsupported_is_reported_with_the_note_and_host_values_are_written(tmp_path):
    prof = HeapProfiler()
    note = "DSP memory profiling refused by QNN with error 1000 (x86 simulator)"
    prof.dsp.mark_unsupported(note)
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    # a stray DSP event (e.g. from a profile) is ignored once the source is refused
    assert prof.record_dsp_events("a", [{"name": DSP_AFTER_EVENT, "unit": "bytes", "value": 5}]) == 0
    prof.close(str(tmp_path / "h.txt"))
    s = prof.summary()
    assert s["sources"]["dsp"] == {"supported": False, "note": note}
    assert s["file_prefix"] == "HOST" and note in s["file_source"]
    assert all(p == "HOST" for p, _, _ in read_two_lines(str(tmp_path / "h.txt")))
    assert "dsp" not in json.load(open(tmp_path / "h.txt.json"))["timeline"][-1]["values"]


def test_dsp_values_from_qnn_profile_events_on_a_device(tmp_path):
    """The device path: QNN reports the DSP heap in the create / free profiles."""
    prof = HeapProfiler()
    prof.dsp.mark_supported()

    def ev(name, value):
        return [{"name": "QNN (load binary) time", "type": 100, "unit": "us", "value": 9, "sub": []},
                {"name": name, "type": 0, "unit": "bytes", "value": value, "sub": []}]

    prof.before_create("a"); prof.after_create("a", True)
    prof.record_dsp_events("a", ev(DSP_BEFORE_EVENT, 928212))
    prof.before_create("b"); prof.after_create("b", True)
    prof.record_dsp_events("b", ev(DSP_BEFORE_EVENT, 990000))   # not the program's first create
    prof.after_free("a")
    prof.record_dsp_events("a", ev(DSP_AFTER_EVENT, 950000))    # a still-live b: not the final value
    prof.record_dsp_events("b", ev(DSP_AFTER_EVENT + " (bytes)", 928300))  # reported before after_free
    prof.after_free("b")
    prof.close(str(tmp_path / "h.txt"))
    assert read_two_lines(str(tmp_path / "h.txt")) == [("DSP", "before_context_created", 928212),
                                                       ("DSP", "after_context_freed", 928300)]
    s = prof.summary()
    assert s["file_prefix"] == "DSP"
    # the device values are checked; the host check depends on what else the process allocated
    dsp_check = [c for c in s["checks"] if c["check"].startswith("DSP")]
    assert dsp_check and all(c["ok"] for c in dsp_check), s["checks"]
    host_check = [c for c in s["checks"] if c["check"].startswith("host.heap_in_use")]
    assert len(host_check) == 1           # host heap still checked alongside the device values
    tl = prof.timeline()
    assert events(tl, "free", "a")[0]["values"]["dsp"]["after_context_freed"] == 950000
    assert events(tl, "create", "b")[0]["values"]["dsp"]["before_context_created"] == 990000


def test_dsp_supported_but_silent_falls_back_to_host(tmp_path):
    prof = HeapProfiler()
    prof.dsp.mark_supported()
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    prof.close(str(tmp_path / "h.txt"))
    assert prof.summary()["file_prefix"] == "HOST"
    assert "no before/after" in prof.summary()["file_source"]


def test_dsp_source_record_and_decision():
    d = DspHeapSource()
    assert d.supported is False and "not probed" in d.note and d.sample() == {}
    d.record(1234)
    assert d.supported and d.sample() == {"dsp_heap": 1234}
    d.mark_unsupported("error 1000")
    d.record(99)
    assert d.sample() == {} and d.note == "error 1000"


# -------------------------------------------------------------------------------- thread safety
def test_many_threads_creating_and_freeing_keep_exact_counts(tmp_path):
    prof = HeapProfiler()
    n_threads, rounds = 8, 60
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                name = f"t{k}-c{i % 3}"
                prof.before_create(name)
                ok = i % 7 != 3
                prof.after_create(name, ok, 1 << 20)
                if i % 5 == 0:
                    prof.mark("evict", context=name)
                if ok:
                    prof.after_free(name)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    prof.close(str(tmp_path / "h.txt"))
    s = prof.summary()
    failed = n_threads * sum(1 for i in range(rounds) if i % 7 == 3)
    st = s["stats"]
    assert st["failed_creates"] == failed
    assert st["creates"] == st["frees"] == n_threads * rounds - failed
    assert st["live"] == 0 and st["pending"] == 0 and st["unmatched_frees"] == 0
    assert 1 <= st["peak_live"] <= n_threads
    tl = prof.timeline()
    assert len(events(tl, "create")) == st["creates"]
    assert all(0 <= e["live"] <= n_threads for e in tl)
    assert [e["time"] for e in tl] == sorted(e["time"] for e in tl)
    assert events(tl, "after_last_free")[0]["live"] == 0
    read_two_lines(str(tmp_path / "h.txt"))


# ------------------------------------------------------------------------------- files and paths
def test_close_is_idempotent_and_writes_once(tmp_path):
    prof = HeapProfiler()
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    path = str(tmp_path / "h.txt")
    assert prof.close(path) == path
    first = open(path).read(), os.stat(path).st_ino
    assert prof.close(path) == path
    assert prof.close(str(tmp_path / "other.txt")) == path      # already written: not again
    assert prof.close() == path
    assert (open(path).read(), os.stat(path).st_ino) == first
    assert not (tmp_path / "other.txt").exists()


def test_path_given_up_front_is_checked_early_and_used_at_close(tmp_path):
    with pytest.raises(QnnrtError, match="does not exist"):
        HeapProfiler(path=str(tmp_path / "missing" / "h.txt"))
    prof = HeapProfiler(path=str(tmp_path / "h.txt"))
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a", evicted=True)
    assert prof.close() == str(tmp_path / "h.txt")
    read_two_lines(str(tmp_path / "h.txt"))
    tl = prof.timeline()
    assert [e["event"] for e in tl] == ["before_first_create", "create", "evict", "free", "after_last_free"]


def test_wants_dsp_only_after_a_successful_probe():
    prof = HeapProfiler()
    assert prof.wants_dsp is False                 # undecided: never send option 4 unprobed
    prof.dsp.mark_unsupported("error 1000")
    assert prof.wants_dsp is False
    prof.dsp.mark_supported()
    assert prof.wants_dsp is True
    assert HeapProfiler(sources=[FakeHost()]).wants_dsp is False


def test_atomic_write_leaves_no_partial_or_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "h.txt"
    target.write_text("old content\n")

    def failing_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(fileio_mod.os, "replace", failing_replace)
    prof = HeapProfiler()
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    with pytest.raises(QnnrtError, match="cannot write the heap profile"):
        prof.close(str(target))
    assert target.read_text() == "old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.txt"]
    monkeypatch.undo()
    assert prof.close(str(target)) == str(target)               # a retry after the failure works
    read_two_lines(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.txt", "h.txt.json"]


def test_write_atomic_replaces_existing_file(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("x" * 10000)
    write_atomic(str(p), "short\n")
    assert p.read_text() == "short\n"


@pytest.mark.parametrize("make_path, message", [
    (lambda d: str(d / "missing" / "h.txt"), "does not exist"),
    (lambda d: str(d), "is a directory"),
    (lambda d: str(d / "afile" / "h.txt"), "is not a directory"),
    (lambda d: "", "no path given"),
])
def test_bad_paths_raise_a_clear_error(tmp_path, make_path, message):
    (tmp_path / "afile").write_text("")
    prof = HeapProfiler()
    with pytest.raises(QnnrtError, match=message) as info:
        prof.close(make_path(tmp_path))
    assert "heap profile" in str(info.value)


def test_unwritable_directory_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(fileio_mod.os, "access", lambda *a, **k: False)
    with pytest.raises(QnnrtError, match="not writable") as info:
        check_output_path(str(tmp_path / "h.txt"), "heap profile")
    assert str(tmp_path) in str(info.value) and "Choose a writable directory" in str(info.value)


# --------------------------------------------------------------------------------------- sources
def test_host_source_reads_mallinfo2_and_rss():
    src = HostHeapSource()
    assert src.supported and "mallinfo2" in src.note
    before = src.sample()
    blob = bytearray(16 << 20)
    after = src.sample()
    assert after["heap_in_use"] - before["heap_in_use"] >= 15 << 20
    assert after["rss"] > 0
    del blob


def test_host_source_falls_back_to_mallinfo_then_rss_only(tmp_path):
    class OldLibc:
        @staticmethod
        def mallinfo():
            m = MallInfo()
            m.uordblks, m.hblkhd = -2, 5          # wrapped 32-bit counter
            return m

    old = HostHeapSource(libc=OldLibc())
    assert "mallinfo()" in old.note and old.sample()["heap_in_use"] == 0xFFFFFFFE + 5

    class Musl:
        pass

    musl = HostHeapSource(libc=Musl())
    assert musl.supported and "not glibc" in musl.note
    assert set(musl.sample()) == {"rss"}
    nothing = HostHeapSource(libc=Musl(), status_path=str(tmp_path / "nope"))
    assert nothing.supported is False and nothing.sample() == {}


def test_pd_source_sums_live_estimates_and_reuses_known_ones():
    pd = PdEstimateSource()
    pd.on_create("a", 10 << 20)
    pd.on_create("b", None)
    assert pd.sample() == {"pd_in_use": 10 << 20}
    assert pd.details()["live_without_estimate"] == ["b"]
    pd.on_free("a")
    pd.on_create("a", None)                       # recreate: estimate known from the first create
    assert pd.sample() == {"pd_in_use": 10 << 20}
    pd.on_free("a"); pd.on_free("b"); pd.on_free("b")
    assert pd.sample() == {"pd_in_use": 0}


def test_pd_note_says_when_no_estimate_was_seen():
    prof = HeapProfiler()
    prof.before_create("a"); prof.after_create("a", True); prof.after_free("a")
    prof.close()
    assert "VERBOSE" in prof.summary()["sources"]["pd_estimate"]["note"]


@pytest.mark.parametrize("line, expected", [
    # real lines from libQnnHtp 2.51 on x86 (QNN's MB are MiB; the exact byte count wins)
    (" <V> Context 1 estimated PD size requirement is ~10.04MB, including largest Graph estimate "
     "10523136 B", 10523136),
    (" <V> Context 1 estimated PD size requirement is ~14.06MB, including largest Graph estimate "
     "14744064 B", 14744064),
    ("Context 3 estimated PD size requirement is ~10.5 MB", int(10.5 * (1 << 20))),
    ("Context 3 estimated PD size requirement is 10 MB", 10 << 20),
    ("context 7 Estimated PD Size Requirement is ~512KB", 512 << 10),
    ("Context 2 estimated PD size requirement: 123456 bytes", 123456),
    ("Context 2 estimated PD size requirement is ~1.5 GiB", int(1.5 * (1 << 30))),
    (" <E> Failed to find available PD for contextId 347 on deviceId 0 coreId 0with context size "
     "estimate 10524416", 10524416),
    ("Failed to find available PD for contextId 1 with context size estimate 14744064 B", 14744064),
    # not context totals
    (" <V> Context 1 graph G_1_0 estimated PD size ~10.04MB, including nonSharedWeight 2097152 B", None),
    (" <V> PD 0 chosen for context 1, estimated future space on pd ~10.04 MB", None),
    ("QnnContext_free done successfully.", None),
    ("", None),
])
def test_parse_pd_estimate(line, expected):
    assert parse_pd_estimate(line) == expected


def test_pd_estimate_from_captured_log_lines():
    lines = [(4, " <V> Context 1 graph G estimated PD size ~10.04MB"),
             (4, " <V> Context 1 estimated PD size requirement is ~10.04MB, including largest Graph "
                 "estimate 10523136 B"),
             (4, " <V> PD 0 chosen for context 1, estimated future space on pd ~10.04 MB")]
    assert pd_estimate_from_log(lines) == 10523136
    assert pd_estimate_from_log([line for _, line in lines]) == 10523136
    assert pd_estimate_from_log([]) is None
