"""`python -m scorer_core [score] [item.json]`: score one item; see `scorer_core.cli`."""

import sys

from scorer_core.cli import main

sys.exit(main())
