"""``python -m harness.compare ...``: kept for scripts; the command is :mod:`harness.cli.compare` (``harness compare``)."""

import sys

if __name__ == "__main__":
    from harness.cli.compare import run_command

    sys.exit(run_command(sys.argv[1:]))
