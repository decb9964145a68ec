"""``python -m harness.check ...``: kept for scripts; the command is :mod:`harness.cli.check` (``harness check``)."""

import sys

if __name__ == "__main__":
    from harness.cli.check import run_command

    sys.exit(run_command(sys.argv[1:]))
