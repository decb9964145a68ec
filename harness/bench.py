"""``python -m harness.bench ...``: kept for scripts; the command is :mod:`harness.cli.bench` (``harness bench``)."""

import sys

if __name__ == "__main__":
    from harness.cli.bench import run_command

    sys.exit(run_command(sys.argv[1:]))
