"""The `qnnrt` command line: one module per subcommand, one entry point (`main`)."""
from qnnrt.cli.main import main

__all__ = ["main"]
