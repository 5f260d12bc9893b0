"""`python -m jobs.tools.report`: the `ctxprec report` command on its own."""

import sys

from jobs.tools.report import main

sys.exit(main())
