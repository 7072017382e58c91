"""A failed QNN free is logged, never ignored and never raised.

Frees run in close(), in cleanup after another error and in finalizers, where raising would hide the
first error or abort the rest of the cleanup; ExecuTorch's QNN context destructor logs a failed
free the same way. The log line names the function, the object and QNN's error name."""
from __future__ import annotations

import logging

from qnnrt._capi import codes

logger = logging.getLogger("qnnrt.core")


def check_free(rc: int, function: str, what: str) -> bool:
    """Log `function`'s failure to free `what` (error level, with QNN's error name); True if it
    succeeded."""
    if rc == 0:
        return True
    code = codes.code_of(rc)
    logger.error("%s failed for %s with QNN error %d (%s); what it held may stay reserved until "
                 "the process exits", function, what, code, codes.error_name(code))
    return False
