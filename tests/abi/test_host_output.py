"""qnnrt writes nothing to its host program's stdout or stderr: QNN's native banners (printed through
the C library's buffered stdout while the libraries load, flushed at exit) go to the `qnnrt.qnn` log."""
import os
import subprocess
import sys
import textwrap

from tests.helpers.data import executorch_pte

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _clean_env() -> dict[str, str]:
    """A user's shell: none of this machine's global Python settings (buffering changes when the
    C library's stdout buffer reaches the file)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PIP_FIND_LINKS")}
    env["PYTHONPATH"] = ROOT
    return env


def test_a_program_with_stdout_to_a_file_sees_only_its_own_output(tmp_path):
    pte = executorch_pte("many_4_fp16")
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np, qnnrt
        x = np.load({str(pte.parent / "forward_input_0.npy")!r})
        print("before")
        for residency in ("auto", "multi-pd:2"):   # this process, and PD worker processes
            prog = qnnrt.load({str(pte)!r}, residency=residency)
            prog.run(None, [x])
            prog.close()
        print("after")
    """))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        r = subprocess.run([sys.executable, str(script)], stdout=o, stderr=e, env=_clean_env(), timeout=300)
    assert r.returncode == 0, err.read_text()[-2000:]
    assert out.read_text() == "before\nafter\n"
    assert err.read_text() == ""


def test_the_native_banner_reaches_the_qnn_log_instead(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s")
        from qnnrt._capi import library
        library.open_library()
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=_clean_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == ""
    assert "qnnrt.qnn" in r.stderr and "LIBNATIVE" in r.stderr
