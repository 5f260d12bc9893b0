"""`python -m jobs.tools.report`: the `ctxprec report` command on its own (entry-point code,
the CLI's layer: the command's arguments are the CLI's)."""

import sys

from jobs.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
