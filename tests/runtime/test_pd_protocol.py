"""The PD worker channel's protocol without a worker process: replies are matched to requests by
id, an abandoned request's reply is dropped when it comes, and a malformed or unexpected frame is
a ProtocolError (never another caller's answer)."""
from __future__ import annotations

import os
import pickle
import threading

import pytest

from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.hosts.pd.worker import Worker
from qnnrt.runtime.performance import Choice


def _pair() -> tuple[ch.PipeEnd, ch.PipeEnd]:
    """(main's end, worker's end) over two pipes."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    return ch.PipeEnd(b_r, a_w), ch.PipeEnd(a_r, b_w)


def _message(kind: bytes, rid: int, message: object) -> bytes:
    return ch.body_frame(kind, rid, proto.dumps(message))


def _read(frame: bytes, kind: type) -> object:
    return proto.loads(ch.frame_body(frame), kind)


def _echo_worker(end: ch.PipeEnd, replies: int) -> threading.Thread:
    """Answers `replies` requests: a call with its call id as the seconds, a control request
    with Voted carrying the request's id."""
    def serve() -> None:
        for _ in range(replies):
            frame = end.recv()
            kind, rid = ch.frame_head(frame)
            if kind == ch.CALL:
                end.send(ch.ok_frame(rid, float(ch.parse_call(frame)[1])))
            else:
                end.send(_message(ch.REPLY, rid, proto.Voted({"rid": rid})))
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_replies_match_their_requests_from_two_threads():
    main, worker = _pair()
    channel = ch.Channel(main)
    n = 200
    _echo_worker(worker, 2 * n)
    got: list[object] = []

    def controls() -> None:
        for _ in range(n):
            got.append(_read(channel.request(proto.dumps(proto.Vote(Choice("default", "none")))),
                             proto.Voted))
    t = threading.Thread(target=controls)
    t.start()
    for i in range(n):
        seconds, tail = ch.parse_ok(channel.call(i))
        assert seconds == float(i) and tail == b""
    t.join(30)
    assert len(got) == n and all(isinstance(v, proto.Voted) for v in got)


def test_an_abandoned_request_reply_is_dropped():
    """A caller that gave up (here a timeout; an interrupt does the same) leaves its reply on the
    wire: the next request reads past it to its own."""
    main, worker = _pair()
    channel = ch.Channel(main)
    with pytest.raises(TimeoutError):
        channel.request(proto.dumps(proto.Close()), timeout=0.05)
    assert channel.busy
    _, rid = ch.frame_head(worker.recv())
    worker.send(_message(ch.REPLY, rid, proto.Closed(None)))   # the late reply
    t = _echo_worker(worker, 1)
    assert ch.parse_ok(channel.call(7))[0] == 7.0
    t.join(5)
    assert not channel.busy


def test_begin_and_finish_keep_a_reply_read_early():
    main, worker = _pair()
    channel = ch.Channel(main)
    first = channel.begin(proto.dumps(proto.Close()))
    _, rid = ch.frame_head(worker.recv())
    worker.send(_message(ch.REPLY, rid, proto.Closed({"heap": 1})))
    t = _echo_worker(worker, 1)
    assert ch.parse_ok(channel.call(3))[0] == 3.0     # reads (and keeps) the begun reply first
    t.join(5)
    assert _read(channel.finish(first), proto.Closed) == proto.Closed({"heap": 1})


def test_a_reply_to_no_request_is_a_protocol_error():
    main, worker = _pair()
    channel = ch.Channel(main)
    worker.send(ch.ok_frame(999, 1.0))   # a stray reply, then nothing
    with pytest.raises(ch.ProtocolError, match="request 999, which is not pending"):
        channel.call(1)


@pytest.mark.parametrize("frame, message", [
    (b"X", "shorter than a frame header"),
    (b"C" + (1).to_bytes(4, "little") + b"not a message", "malformed"),
    (b"C" + (1).to_bytes(4, "little") + pickle.dumps(proto.Close()), "malformed"),   # no pickle
    (ch.body_frame(ch.CONTROL, 1, proto.dumps(proto.Voted(None))), "where a Start or"),  # a reply
])
def test_the_worker_answers_a_malformed_frame_with_a_failure(frame, message):
    main, worker_end = _pair()
    worker = Worker(worker_end)
    t = threading.Thread(target=worker.loop, daemon=True)
    t.start()
    main.send(frame)
    reply = main.recv()
    assert reply[:1] == ch.ERROR
    failure = _read(reply, proto.Failure)
    assert isinstance(failure, proto.Failure) and message in failure.message
    assert not failure.internal      # a ProtocolError is a qnnrt error
    main.close()   # the worker's loop ends with its channel
    t.join(10)
    assert not t.is_alive()


def test_an_unknown_request_is_a_failure_reply_with_its_id():
    main, worker_end = _pair()
    worker = Worker(worker_end)
    t = threading.Thread(target=worker.loop, daemon=True)
    t.start()
    main.send(_message(ch.CONTROL, 41, proto.Done()))   # a message, but no request
    reply = main.recv()
    assert ch.frame_head(reply) == (ch.ERROR, 41)
    failure = _read(reply, proto.Failure)
    assert isinstance(failure, proto.Failure) and "a Done where a Start or" in failure.message
    main.close()
    t.join(10)


def test_a_failure_rebuilds_a_qnn_error():
    from qnnrt.errors import QnnError
    from qnnrt.runtime.hosts.pd.handle import PdQnnError, PdWorker
    e = QnnError("graphExecute", 1100, "QNN_GRAPH_ERROR_GENERAL", "", ["<E> dma failed"], "retry", "")
    frame = _message(ch.ERROR, 1, proto.Failure.of(e, "tb"))
    array, block = ch.Arena().alloc((1,), proto.STATUS_DTYPE)
    err = PdWorker(1, ["a"], proto.StatusBlock(array), block).failure(frame, "graph 'g'")
    assert isinstance(err, PdQnnError) and isinstance(err, QnnError)
    assert err.code == 1100 and err.log_tail == ["<E> dma failed"] and "in PD 1, graph 'g'" in str(err)

