"""Every QNN free's return code is checked: a failed free is logged with QNN's error name, never
raised from close, and never silently dropped; a failed construction undoes what it made."""
import logging

import pytest

from qnnrt.core import Backend, Context, ContextBinary
from qnnrt.core.freeing import check_free
from qnnrt.errors import QnnrtError


def test_a_failed_free_is_logged_with_the_qnn_error_name(caplog):
    with Backend() as be:
        rc = be.api.contextFree(None, None)   # QNN refuses a null context handle
    assert rc != 0
    with caplog.at_level(logging.ERROR, logger="qnnrt.core"):
        assert check_free(rc, "contextFree", "context 'x'") is False
    assert "contextFree failed for context 'x' with QNN error 5002 (QNN_CONTEXT_ERROR_INVALID_HANDLE)" \
        in caplog.text


def test_a_successful_close_logs_nothing(small_binary, caplog):
    with caplog.at_level(logging.ERROR, logger="qnnrt.core"):
        with Backend() as be, ContextBinary(small_binary.path) as b:
            Context(be, b).close()
    assert "failed" not in caplog.text


def test_a_context_on_a_closed_backend_is_refused_and_nothing_leaks(small_binary):
    be = Backend()
    b = ContextBinary(small_binary.path)
    be.close()
    with pytest.raises(QnnrtError):
        Context(be, b)
    assert be.live_contexts() == []
    b.close()
