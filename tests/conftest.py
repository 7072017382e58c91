"""Shared fixtures: real context binaries and programs built at test time (cached per session)."""
from tests.qnn_fixtures import small_binary, two_graph_binary  # noqa: F401

try:
    from tests.build_fixtures import *  # noqa: F401,F403  (demo programs, from the builder)
except ImportError:
    pass
