"""``python -m harness.tune ...``: kept for scripts; the command is :mod:`harness.cli.tune` (``harness tune``)."""

import sys

if __name__ == "__main__":
    from harness.cli.tune import run_command

    sys.exit(run_command(sys.argv[1:]))
