"""``python -m harness.server ...``: kept for scripts; the command is :mod:`harness.cli.server` (``harness server``)."""

import sys

if __name__ == "__main__":
    from harness.cli.server import run_command

    sys.exit(run_command(sys.argv[1:]))
