"""The session's guard on the user's home sees a file qnnrt's cache gained, one that changed, and a
new folder beside it; it sees nothing when nothing changed."""
from __future__ import annotations

import os

from tests.helpers.home_guard import HomeSnapshot


def test_the_home_guard_sees_every_kind_of_change(tmp_path):
    cache = tmp_path / ".cache"
    (cache / "qnnrt").mkdir(parents=True)
    (cache / "qnnrt" / "a.json").write_text("1")
    before = HomeSnapshot.take(cache)
    assert HomeSnapshot.take(cache).changes_since(before) == []
    (cache / "qnnrt" / "sub").mkdir()
    (cache / "qnnrt" / "sub" / "b.bin").write_bytes(b"x")
    assert HomeSnapshot.take(cache).changes_since(before) == ["~/.cache/qnnrt/sub/b.bin"]
    before = HomeSnapshot.take(cache)
    os.utime(cache / "qnnrt" / "a.json", ns=(1, 1))
    (cache / "matplotlib").mkdir()
    assert HomeSnapshot.take(cache).changes_since(before) == ["~/.cache/matplotlib", "~/.cache/qnnrt/a.json"]


def test_the_test_session_caches_outside_the_home():
    from pathlib import Path
    home = Path.home().resolve()
    for var in ("QNNRT_CACHE_DIR", "XDG_CACHE_HOME", "MPLCONFIGDIR"):
        assert home not in Path(os.environ[var]).resolve().parents or \
            Path(os.environ[var]).resolve().is_relative_to(Path(__file__).resolve().parents[1]), var
