"""``python -m flywheel.flows.cli``: the same as the ``flywheel`` console script."""

import sys

from flywheel.flows.cli import main

sys.exit(main())
