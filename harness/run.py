"""``python -m harness.run ...``: kept for scripts; the command is :mod:`harness.cli.run` (``harness run``)."""

import sys

if __name__ == "__main__":
    from harness.cli.run import run_command

    sys.exit(run_command(sys.argv[1:]))
