"""What the test session may not touch in the user's home: qnnrt's cache folder there (and new
entries beside it in ~/.cache), compared before and after."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HomeSnapshot:
    qnnrt_files: frozenset[tuple[str, int, int]]   # (path under ~/.cache/qnnrt, size, mtime ns)
    cache_entries: frozenset[str]                    # names directly under ~/.cache

    @staticmethod
    def take(cache: Path | None = None) -> HomeSnapshot:
        cache = cache if cache is not None else Path.home() / ".cache"
        root = cache / "qnnrt"
        files = frozenset((str(f.relative_to(root)), st.st_size, st.st_mtime_ns)
                          for f in root.rglob("*") if (st := f.lstat()) and not f.is_dir()) \
            if root.is_dir() else frozenset()
        entries = frozenset(e.name for e in cache.iterdir()) if cache.is_dir() else frozenset()
        return HomeSnapshot(files, entries)

    def changes_since(self, before: HomeSnapshot) -> list[str]:
        """What differs, as paths a person can look at (empty when nothing did)."""
        touched = {f"~/.cache/qnnrt/{name}" for name, *_ in self.qnnrt_files ^ before.qnnrt_files}
        touched |= {f"~/.cache/{name}" for name in self.cache_entries - before.cache_entries}
        return sorted(touched)
