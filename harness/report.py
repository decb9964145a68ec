"""``python -m harness.report ...``: kept for scripts; the command is :mod:`harness.cli.report` (``harness report``)."""

import sys

if __name__ == "__main__":
    from harness.cli.report import run_command

    sys.exit(run_command(sys.argv[1:]))
