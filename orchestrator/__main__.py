"""``python -m orchestrator``: the ``orchestrator`` command, for a checkout without its script."""

import sys

from orchestrator.cli import main

sys.exit(main())
