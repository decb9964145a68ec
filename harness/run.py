"""``python -m harness.run ...``: kept for scripts; the command is :mod:`harness.cli.run` (``harness run``)."""

import sys

if __name__ == "__main__":
    from harness.cli import prepare_process, start_tracking_early

    prepare_process()
    start_tracking_early(sys.argv[1:])  # before Hydra is imported and the config composed
    from harness.cli.run import run_command

    sys.exit(run_command(sys.argv[1:]))
