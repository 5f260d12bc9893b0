"""`ctxprec`, every user command: `main` parses and dispatches (jobs.cli.main), one module per
command holds its options."""

from jobs.cli.main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
