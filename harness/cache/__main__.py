"""``python -m harness.cache info|clear``: kept for scripts; the command is :mod:`harness.cli.cache` (``harness cache``)."""

import sys

from harness.cli.cache import run_command

sys.exit(run_command(sys.argv[1:]))
