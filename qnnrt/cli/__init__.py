"""The `qnnrt` command line: the entry point (qnnrt.cli.main) and one module per subcommand."""
