"""The typed wire (runtime/ipc/wire.py): messages round-trip by their declared types, without pickle,
and anything that does not fit its declaration is refused on either side."""
from __future__ import annotations

import marshal
import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from qnnrt.profiling.trace_events import Mark, Sample, Span, TraceBatch
from qnnrt.runtime.ipc.wire import Wire, WireError


@dataclass(frozen=True)
class Inner:
    name: str
    size: int | None = None


@dataclass(frozen=True)
class Other:
    flag: bool


@dataclass(frozen=True)
class Message:
    ints: tuple[int, ...]
    pair: tuple[str, float]
    by_key: dict[int, Inner]
    choice: Inner | Other
    source: str | bytes
    array: np.ndarray
    free: dict | None
    trace: TraceBatch | None = None


WIRE = Wire([Inner, Message])


def _message(**changes) -> Message:
    base = dict(ints=(1, 2, 3), pair=("a", 1.5), by_key={4: Inner("x", 7), 5: Inner("y")},
                choice=Other(True), source=b"\x00\x01", array=np.arange(6, dtype=np.int16).reshape(2, 3),
                free={"events": [{"cycles": np.int64(5), "name": "op"}], "n": (1, 2)},
                trace=TraceBatch(12, "PD 1 worker", ((1, "main"),),
                                 (Span("g", "graph", 1, 10, 20, {"context": "c0"}),
                                  Sample("pd", 15, {"bytes": 3}), Mark("evict", "pool", 1, 16))))
    base.update(changes)
    return Message(**base)  # type: ignore[arg-type]


def test_a_message_round_trips_by_its_declared_types():
    m = _message()
    back = WIRE.loads(WIRE.dumps(m), Message)
    assert back.ints == (1, 2, 3) and back.pair == ("a", 1.5) and back.by_key == m.by_key
    assert back.choice == Other(True) and back.source == b"\x00\x01"
    assert back.array.dtype == np.int16 and np.array_equal(back.array, m.array)
    assert back.free == {"events": [{"cycles": 5, "name": "op"}], "n": (1, 2)}
    assert back.trace == m.trace and isinstance(back.trace.events[0], Span)
    assert isinstance(WIRE.loads(WIRE.dumps(_message(choice=Inner("z", 1))), Message).choice, Inner)


def test_the_bytes_are_plain_data_not_pickle():
    data = WIRE.dumps(_message())
    assert not data.startswith(b"\x80")   # no pickle protocol header
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)
    assert isinstance(marshal.loads(data), list)


@pytest.mark.parametrize("bad", [dict(ints=(1, "2")), dict(pair=("a",)), dict(choice="other"),
                                 dict(free={"x": object()}), dict(array=[1, 2]),
                                 dict(by_key={"4": Inner("x")})])
def test_a_value_that_does_not_fit_its_declaration_is_refused_when_sent(bad):
    with pytest.raises(WireError):
        WIRE.dumps(_message(**bad))


def test_a_message_of_another_protocol_or_kind_is_refused():
    with pytest.raises(WireError, match="not a message of this protocol"):
        WIRE.dumps(Other(True))
    with pytest.raises(WireError, match="where a Message was expected"):
        WIRE.loads(WIRE.dumps(Inner("x")), Message)


@pytest.mark.parametrize("data", [b"", b"garbage", marshal.dumps([9, []]), marshal.dumps([0, ["x"]]),
                                  marshal.dumps([0, [5, None]])])
def test_malformed_bytes_are_refused_when_received(data):
    with pytest.raises(WireError):
        WIRE.loads(data, object)


def _names_any(t) -> bool:
    import typing
    if t is typing.Any or t is object:
        return True
    return any(_names_any(a) for a in typing.get_args(t) if a is not Ellipsis)


def test_no_message_between_processes_declares_any():
    """Every message of the PD protocol, the vetting protocol and every step descriptor declares
    its fields' types (free-form data is a bare dict or list of plain values, never Any)."""
    import dataclasses
    import typing

    import qnnrt.executorch.plan  # noqa: F401 - registers the .pte steps' descriptors
    from qnnrt.runtime.hosts.pd import protocol as pd_protocol
    from qnnrt.runtime.hosts.pd import portable
    from qnnrt.runtime.vet import protocol as vet_protocol
    classes = [*pd_protocol.WIRE.messages, *vet_protocol.WIRE.messages,
               *portable.descriptors()]
    seen, todo, bad = set(), list(classes), []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name, hint in typing.get_type_hints(cls).items():
            if _names_any(hint):
                bad.append(f"{cls.__name__}.{name}")
            todo += [a for a in _args(hint) if dataclasses.is_dataclass(a) or hasattr(a, "_fields")]
    assert len(classes) > 20 and not bad, bad


def _args(t):
    import typing
    out = [t]
    for a in typing.get_args(t):
        out += _args(a)
    return [a for a in out if isinstance(a, type)]
