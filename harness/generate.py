"""``python -m harness.generate ...``: kept for scripts; the command is :mod:`harness.cli.generate` (``harness generate``)."""

import sys

if __name__ == "__main__":
    from harness.cli.generate import run_command

    sys.exit(run_command(sys.argv[1:]))
