"""A backend dropped without close() is freed on the reaper's thread, never where the garbage
collector happens to run: that can be inside a QNN call (a log callback that allocates starts it),
and a QNN free made there re-enters QNN and deadlocks it (seen: a prefetch thread's contextCreate,
its log callback, a collected backend's contextFree)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_backend_collected_inside_a_qnn_log_callback_is_freed_later(small_binary, tmp_path):
    script = tmp_path / "reaped.py"
    script.write_text(textwrap.dedent(f"""
        import gc, threading, time
        from qnnrt.core import Backend, Context, ContextBinary
        binary = ContextBinary({str(small_binary.path)!r})
        dropped = Backend(soc="SM8550")
        ctx = Context(dropped, binary)
        dropped.cycle = dropped                    # garbage only the collector frees
        closed_on = []
        real_close = Backend.close
        def close(self):
            if self is not live:
                closed_on.append(threading.current_thread().name)
            real_close(self)
        Backend.close = close
        live = Backend(soc="SM8550", log_level="verbose")
        del dropped, ctx
        collected = []
        live.log.listeners.append(lambda level, text: collected.append(gc.collect()) if not collected else None)
        with Context(live, binary):                # its creation logs: the callback collects `dropped`
            pass
        assert collected, "QNN logged nothing during the creation"
        for _ in range(100):
            if closed_on:
                break
            time.sleep(0.05)
        assert closed_on == ["qnnrt-backend-reaper"], closed_on
        live.close()
        print("ok")
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")
