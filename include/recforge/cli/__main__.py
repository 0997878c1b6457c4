"""``python -m recforge.cli``: the same as the ``recforge`` console script."""

import sys

from recforge.cli import main

sys.exit(main())
