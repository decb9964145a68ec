"""``python -m harness.datasets validate ...``: kept for scripts; the command is :mod:`harness.cli.datasets` (``harness datasets``)."""

import sys

if __name__ == "__main__":
    from harness.cli.datasets import run_command

    sys.exit(run_command(sys.argv[1:]))
