"""``python -m harness.datasets validate ...``: kept for scripts; the command is :mod:`harness.cli.datasets` (``harness datasets``)."""

import sys

from harness.cli.datasets import run_command

sys.exit(run_command(sys.argv[1:]))
