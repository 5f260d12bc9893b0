"""`ctxprec`, every user command: `main` parses and dispatches (jobs.cli.main); the options of
a command that runs a tool are declared by its record (jobs.tools.tool_options)."""

from jobs.cli.arguments import options_of
from jobs.cli.main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main", "options_of"]
