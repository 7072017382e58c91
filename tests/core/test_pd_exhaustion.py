"""The `pd` demo exhausts the simulator's PD budget when every context is created up front (what
ExecuTorch and ORT do); each context alone loads."""
import re

from qnnrt.core import Backend, Context, ContextBinary
from qnnrt.errors import QnnError


def test_pd_demo_exhausts_pd_when_all_contexts_are_created(built_pd_program):
    man = built_pd_program.manifest
    assert len(man.contexts) == 402
    live, estimates, failure = [], [], None
    with Backend(soc=man.soc_model, log_level="verbose") as be:
        try:
            for c in man.contexts:
                try:
                    ctx = Context(be, ContextBinary(c.file))
                except QnnError as e:
                    failure = e
                    break
                live.append(ctx)
                for line in ctx.creation_log:
                    m = re.search(r"estimated PD size requirement is ~?([\d.]+)\s*MB", line)
                    if m:
                        estimates.append(float(m.group(1)))
        finally:
            for ctx in live:
                ctx.close()
        assert failure is not None and failure.code == 1002 and failure.is_pd_exhaustion, failure
        assert 300 < len(live) < 402                       # measured: 346 live, the 347th fails
        assert len(estimates) == len(live) and min(estimates) >= 10.0
        # each context alone loads (first, the one that failed, last)
        for c in (man.contexts[0], man.contexts[len(live)], man.contexts[-1]):
            with Context(be, ContextBinary(c.file)):
                pass
