"""The typed wire between qnnrt's processes: frozen dataclasses (and NamedTuples) to bytes and back,
by the types their fields declare, without pickle.

A record travels as the list of its fields, each encoded by its declared type; the bytes are
`marshal`'s (plain values only: it builds no object of any class, runs no code). Decoding checks
every value against its declared type and builds the record, so a frame carries data, never a class
the other side did not declare: what a message may hold is what its dataclass says. A field of a
union of records names its member by position in the union; `Any`, `object` and bare `dict` /
`list` fields hold plain values (None, bool, int, float, str, bytes, and lists, tuples and dicts of
them), the free-form data a profile or a report is. numpy arrays travel as dtype, shape and bytes.

`Wire(messages)` is one protocol's top level: the message classes it may carry, each named by its
position in that tuple.
"""
from __future__ import annotations

import dataclasses
import marshal
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from qnnrt.runtime.ipc.child import ProtocolError

T = TypeVar("T")
_PRIMITIVES = (bool, int, float, str, bytes, type(None))


class WireError(ProtocolError):
    """A value does not fit the type its message declares (sending), or bytes that are not a
    message of this protocol (receiving)."""


def is_record(t: object) -> bool:
    return isinstance(t, type) and (dataclasses.is_dataclass(t) or
                                    (issubclass(t, tuple) and hasattr(t, "_fields")))


_FIELDS: dict[type, list[tuple[str, Any]]] = {}


def _fields(cls: type) -> list[tuple[str, Any]]:
    """(name, declared type) of each field of a record class, resolved once."""
    out = _FIELDS.get(cls)
    if out is None:
        hints = typing.get_type_hints(cls)
        names = ([f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls)
                 else list(cls._fields))  # type: ignore[attr-defined]
        out = _FIELDS[cls] = [(n, hints[n]) for n in names]
    return out


def _members(t: Any) -> tuple[Any, ...] | None:
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        return typing.get_args(t)
    return None


def _plain(v: object, where: str) -> object:
    """A free-form value as plain data (numpy scalars as Python numbers)."""
    if isinstance(v, _PRIMITIVES):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list):
        return [_plain(x, where) for x in v]
    if isinstance(v, tuple):
        return tuple(_plain(x, where) for x in v)
    if isinstance(v, dict):
        return {_plain(k, where): _plain(x, where) for k, x in v.items()}
    raise WireError(f"{where}: a {type(v).__name__} where plain data (numbers, strings, lists, "
                    f"dicts) is declared")


def encode(v: object, t: Any, where: str = "a message") -> object:
    """`v`, declared as type `t`, as plain data."""
    if t is Any or t is object:
        return _plain(v, where)
    members = _members(t)
    if members is not None:
        return _encode_union(v, t, members, where)
    origin = typing.get_origin(t) or t
    if is_record(origin):
        if not isinstance(v, origin):
            raise WireError(f"{where}: a {type(v).__name__} where {origin.__name__} is declared")
        return [encode(getattr(v, n), ft, f"{where}.{n}") for n, ft in _fields(origin)]
    if origin is np.ndarray:
        if not isinstance(v, np.ndarray):
            raise WireError(f"{where}: a {type(v).__name__} where an array is declared")
        return [v.dtype.str, list(v.shape), np.ascontiguousarray(v).tobytes()]
    if origin in (list, tuple):
        return _encode_sequence(v, origin, typing.get_args(t), where)
    if origin is dict:
        return _encode_dict(v, typing.get_args(t), where)
    if origin is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if origin in _PRIMITIVES and _fits(v, origin):
        return v
    raise WireError(f"{where}: a {type(v).__name__} where {getattr(t, '__name__', t)} is declared")


def _encode_union(v: object, t: Any, members: tuple[Any, ...], where: str) -> object:
    """None as itself (when the union allows it), else [the member's position, the value]."""
    if v is None and type(None) in members:
        return None
    for i, m in enumerate(members):
        if m is not type(None) and _fits(v, m):
            return [i, encode(v, m, where)]
    raise WireError(f"{where}: a {type(v).__name__} where {t} is declared")


def _encode_sequence(v: object, origin: type, args: tuple[Any, ...], where: str) -> object:
    if not isinstance(v, (list, tuple)):
        raise WireError(f"{where}: a {type(v).__name__} where a {origin.__name__} is declared")
    if not args:
        return [_plain(x, where) for x in v]
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(v) != len(args):
            raise WireError(f"{where}: {len(v)} values where {len(args)} are declared")
        return [encode(x, a, where) for x, a in zip(v, args)]
    return [encode(x, args[0], where) for x in v]


def _encode_dict(v: object, args: tuple[Any, ...], where: str) -> object:
    if not isinstance(v, dict):
        raise WireError(f"{where}: a {type(v).__name__} where a dict is declared")
    if not args:
        return _plain(v, where)
    return {encode(k, args[0], where): encode(x, args[1], f"{where}[{k!r}]") for k, x in v.items()}


def _fits(v: object, t: Any) -> bool:
    """Whether `v` is of union member `t` (exactly, for a bool and an int)."""
    origin = typing.get_origin(t) or t
    if t is Any or t is object:
        return True
    if origin is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if origin is float:
        return isinstance(v, float)
    return isinstance(origin, type) and isinstance(v, origin)


def decode(d: object, t: Any, where: str = "a message") -> Any:
    """The value of type `t` that `encode` made `d` of; WireError when `d` is not one."""
    if t is Any or t is object:
        return d
    members = _members(t)
    if members is not None:
        if d is None and type(None) in members:
            return None
        if not (isinstance(d, list) and len(d) == 2 and isinstance(d[0], int)
                and 0 <= d[0] < len(members)):
            raise WireError(f"{where}: not a value of {t}")
        return decode(d[1], members[d[0]], where)
    origin = typing.get_origin(t) or t
    if is_record(origin):
        fields = _fields(origin)
        if not isinstance(d, list) or len(d) != len(fields):
            raise WireError(f"{where}: not a {origin.__name__}")
        return origin(*[decode(x, ft, f"{where}.{n}") for x, (n, ft) in zip(d, fields)])
    if origin is np.ndarray:
        if not (isinstance(d, list) and len(d) == 3):
            raise WireError(f"{where}: not an array")
        dtype, shape, data = d
        return np.frombuffer(data, np.dtype(dtype)).reshape(shape).copy()
    if origin in (list, tuple):
        return _decode_sequence(d, origin, typing.get_args(t), where)
    if origin is dict:
        return _decode_dict(d, typing.get_args(t), where)
    if origin in _PRIMITIVES and _fits(d, origin):
        return d
    raise WireError(f"{where}: a {type(d).__name__} where {getattr(t, '__name__', t)} is declared")


def _decode_sequence(d: object, origin: type, args: tuple[Any, ...], where: str) -> object:
    if not isinstance(d, (list, tuple)):
        raise WireError(f"{where}: not a {origin.__name__}")
    if not args:
        items = list(d)
    elif origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(d) != len(args):
            raise WireError(f"{where}: {len(d)} values where {len(args)} are declared")
        items = [decode(x, a, where) for x, a in zip(d, args)]
    else:
        items = [decode(x, args[0], where) for x in d]
    return tuple(items) if origin is tuple else items


def _decode_dict(d: object, args: tuple[Any, ...], where: str) -> object:
    if not isinstance(d, dict):
        raise WireError(f"{where}: not a dict")
    if not args:
        return d
    return {decode(k, args[0], where): decode(x, args[1], where) for k, x in d.items()}


class Wire:
    """One protocol's messages: `dumps` any of them, `loads` one of the kind a reader expects."""

    def __init__(self, messages: Sequence[type]) -> None:
        self.messages = tuple(messages)
        self._index = {m: i for i, m in enumerate(self.messages)}

    def dumps(self, message: object) -> bytes:
        i = self._index.get(type(message))
        if i is None:
            raise WireError(f"{type(message).__name__} is not a message of this protocol")
        return marshal.dumps([i, encode(message, type(message), type(message).__name__)])

    def loads(self, data: bytes, expected: type[T] | tuple[type, ...]) -> T:
        """The message in `data`; WireError when it is malformed or not of `expected` (a class or
        a tuple of classes)."""
        try:
            tree = marshal.loads(data)
        except (EOFError, ValueError, TypeError) as e:
            raise WireError(f"a malformed message: {e}") from None
        if not (isinstance(tree, list) and len(tree) == 2 and isinstance(tree[0], int)
                and 0 <= tree[0] < len(self.messages)):
            raise WireError("a malformed message: no message kind")
        cls = self.messages[tree[0]]
        message = decode(tree[1], cls, cls.__name__)
        if not isinstance(message, expected):
            kinds = (expected,) if isinstance(expected, type) else expected
            raise WireError(f"a {cls.__name__} where a {' or '.join(c.__name__ for c in kinds)} "
                            f"was expected")
        return message  # type: ignore[return-value]
