"""A Genie bundle's files stay inside its folder, and its JSON files are read through qnnrt's one
bounded reader (issue 47): paths out of the folder (`..`, absolute, a symbolic link out), configs
nested 100,000 deep or of hundreds of MB are clear FormatErrors naming the file, before anything
is read whole."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qnnrt.errors import FormatError
from qnnrt.formats.genie import read_genie_config
from tests.genie.conftest import edit_config
from tests.helpers.cli_helpers import ROOT


def _ctx_bins(bundle, names):
    def change(d):
        d["dialog"]["engine"]["model"]["binary"]["ctx-bins"] = names
    edit_config(bundle, change)


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "tokenizer"])
def test_a_path_out_of_the_bundle_is_refused(bundle_copy, tmp_path, how):
    outside = tmp_path / "outside.bin"
    first = sorted(p.name for p in bundle_copy.glob("*.bin"))[0]
    outside.write_bytes((bundle_copy / first).read_bytes())          # a valid file: only where it is matters
    if how == "dotdot":
        _ctx_bins(bundle_copy, ["../outside.bin"])
    elif how == "absolute":
        _ctx_bins(bundle_copy, [str(outside)])
    elif how == "symlink":
        (bundle_copy / first).unlink()
        (bundle_copy / first).symlink_to(outside)
    else:
        (tmp_path / "tok.json").write_bytes((bundle_copy / "tokenizer.json").read_bytes())
        edit_config(bundle_copy, lambda d: d["dialog"]["tokenizer"].__setitem__("path", "../tok.json"))
    with pytest.raises(FormatError, match="outside the bundle folder") as e:
        read_genie_config(bundle_copy)
    assert "genie_config.json" in str(e.value)


def test_a_symlink_loop_is_refused(bundle_copy):
    first = sorted(p.name for p in bundle_copy.glob("*.bin"))[0]
    (bundle_copy / first).unlink()
    (bundle_copy / first).symlink_to(bundle_copy / first)
    with pytest.raises(FormatError, match="cannot be resolved|does not exist"):
        read_genie_config(bundle_copy)


@pytest.mark.parametrize("name", ["genie_config.json", "htp_backend_ext_config.json"])
def test_a_config_nested_100000_deep_or_huge_is_a_clear_error(bundle_copy, name):
    ext = [p for p in bundle_copy.glob("*.json") if "ext" in p.name or "htp" in p.name]
    target = bundle_copy / name if name == "genie_config.json" else ext[0]
    target.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match="deeper than 64") as e:
        read_genie_config(bundle_copy)
    assert target.name in str(e.value)
    with open(target, "wb") as f:                        # 300 MB, sparse: refused from its size
        f.truncate(300 << 20)
    with pytest.raises(FormatError, match="more than the") as e:
        read_genie_config(bundle_copy)
    assert target.name in str(e.value)


def test_the_cli_says_so_in_one_line(bundle_copy):
    _ctx_bins(bundle_copy, ["/etc/hostname"])
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "inspect", str(bundle_copy)], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 1 and "outside the bundle folder" in r.stderr and "Traceback" not in r.stderr
