"""``python -m harness.cache info|clear``: kept for scripts; the command is :mod:`harness.cli.cache` (``harness cache``)."""

import sys

if __name__ == "__main__":
    from harness.cli.cache import run_command

    sys.exit(run_command(sys.argv[1:]))
