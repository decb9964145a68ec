"""``harness run [overrides]`` (also ``python -m harness.run``): one experiment, or a sweep with ``-m``.

Examples::

    harness run                                   # defaults: kestrel_kb, recursive, faiss
    harness run chunker=semantic chunker.threshold=0.8
    harness run -m chunker=fixed,recursive chunker.chunk_size=200,400 retriever=faiss,bm25
    harness run -m hydra/launcher=ray_local chunker.chunk_size=200,400

The work is :func:`harness.experiment.run.execute`; this module only hands Hydra's config
to it, prints a sweep job's place, and maps the outcomes to exit codes: 2 and one line on
stderr for a configuration error (:class:`harness.experiment.errors.ConfigError`, or a Hydra
composition error such as an unknown key; ``HYDRA_FULL_ERROR=1`` shows the traceback
instead), :data:`harness.tracking.tracker.EXIT_BUSY` (75) for a busy configuration, 130 for
Ctrl-C, 1 and one line for an error whose message says everything
(:class:`harness.types.OneLineError`: a bad reply from an embedding endpoint, a NaN refused
at a boundary), 1 for any other error (its traceback from the task function down, as Hydra
reports a failed job, printed by this module; the whole traceback with ``HYDRA_FULL_ERROR=1``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from typing import Sequence

from harness.cli import prepare_process

prepare_process()

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from harness.experiment.build import PROJECT_ROOT, register_resolvers  # noqa: E402
from harness.experiment.errors import ConfigError  # noqa: E402
from harness.experiment.run import execute, note_invalid_job, sweep_position  # noqa: E402
from harness.tracking.callbacks import SweepRefused  # noqa: E402
from harness.tracking.tracker import EXIT_BUSY  # noqa: E402
from harness.types import OneLineError  # noqa: E402

#: Exit code of a configuration error (as argparse uses for bad arguments).
EXIT_CONFIG = 2

# Hydra composes and resolves the config (``hydra.run.dir`` is ``${paths.root}/...``, i.e.
# ``${project_root:}``) before :func:`main` is entered, and a launcher's worker process (joblib,
# Ray) composes its job's config after unpickling :func:`main`, which imports this module: the
# resolvers are registered here, by the entry point, not by the run core.
register_resolvers()


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns the objective metric value (the logged one for a skipped job).

    A job whose configuration is RUNNING in another live process (``RunBusy``) exits with
    :data:`EXIT_BUSY`; inside a multirun it returns NaN instead, so the sweep goes on (its
    parent run records the job and the sweep exits with that code at the end). A job with
    an invalid configuration inside a multirun prints one line, is recorded on the parent
    run (no run of its own) and returns NaN; the sweep exits 2 at the end.
    """
    from harness.experiment import build
    from harness.tracking.worker import RunBusy

    position = sweep_position()
    name = str(cfg.tracking.run_name or build.run_name(cfg))
    place = None if position is None else f"job {position[0]}/{position[1] or '?'}"
    if place is not None:
        print(f"{place}: {name}")
        sys.stdout.flush()
    try:
        return float(execute(cfg)["objective"])
    except RunBusy:
        if position is not None:
            return float("nan")
        raise SystemExit(EXIT_BUSY) from None
    except ConfigError as exc:
        if place is None:
            if _full_error():
                raise
            print(f"harness run: {exc}", file=sys.stderr)  # here, not below: Hydra would add a line of its own
            raise SystemExit(EXIT_CONFIG) from None
        print(f"{place} invalid: {name}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        note_invalid_job(cfg, name, str(exc))
        return math.nan
    except Exception as exc:
        if place is not None:
            print(f"{place} FAILED: {name}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            sys.stderr.flush()
        raise


def run_command(argv: Sequence[str]) -> int:
    """``harness run ARGV``: Hydra parses ``argv`` as it would ``python -m harness.run ARGV``.

    Returns 0, or :data:`EXIT_CONFIG` after printing a configuration error as one line on
    stderr (also a sweep whose jobs would not be the ones typed: a setting given twice, a
    value listed twice, an empty sweep; see :func:`harness.tracking.callbacks.plan_sweep`;
    refused before any MLflow run or job exists); 130 after Ctrl-C. Other errors are reported as Hydra reports them (exit 1).
    """
    sys.argv = ["harness run", *argv]
    _register_sweeper()
    if {"-m", "--multirun"} & set(argv):  # an unknown option would fail only when its job is reached
        from harness.experiment.errors import sweep_option_error

        line = sweep_option_error(argv, PROJECT_ROOT / "conf")
        if line is not None:
            print(f"harness run: {line}", file=sys.stderr)
            return EXIT_CONFIG
    else:  # a single run: Hydra keeps the last of a key given twice; say so (scripts append overrides to a base list)
        from harness.experiment.errors import repeated_override_error

        line = repeated_override_error(argv)
        if line is not None:
            print(f"harness run: warning: {line}", file=sys.stderr)
        screened = [a for a in argv if a.lstrip("+").startswith("sweep.screen=") and a.split("=", 1)[1] not in ("null", "")]
        if screened:
            print(f"harness run: warning: {screened[-1]}: screening applies to a sweep (-m) only; this single run ignores it", file=sys.stderr)
    full = os.environ.get("HYDRA_FULL_ERROR")
    global _USER_FULL_ERROR
    _USER_FULL_ERROR = full == "1"
    # Hydra logs a failed class lookup before raising it; the raised error is reported once, below
    logging.getLogger("hydra.utils").addFilter(_drop_lookup_errors)
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing: a config error becomes one line here
    try:
        main()
    except SweepRefused as exc:  # the sweep plan refused the jobs before any run or job existed
        _restore(full)
        print(f"harness run: {exc.line}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:  # the run, and a sweep's parent, are closed KILLED on the way out
        _restore(full)
        print("interrupted (Ctrl-C): the current run is closed as KILLED", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - reported below, as one line or as Hydra would
        _restore(full)
        line = None if full == "1" else _config_line(exc)
        if line is None and full != "1" and isinstance(exc, OneLineError):  # its message is the whole story; the run is FAILED with it
            print(f"harness run: {' '.join(str(exc).split())}", file=sys.stderr)
            return 1
        if line is None:
            if full == "1":
                raise
            _report(exc)
            return 1
        print(f"harness run: {line}", file=sys.stderr)
        return EXIT_CONFIG
    _restore(full)
    return 0


#: ``HYDRA_FULL_ERROR=1`` as the user set it, once :func:`run_command` has set it for Hydra itself.
_USER_FULL_ERROR: bool | None = None


def _full_error() -> bool:
    """True when the user asked for full tracebacks (``HYDRA_FULL_ERROR=1``)."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1" if _USER_FULL_ERROR is None else _USER_FULL_ERROR


def _register_sweeper() -> None:
    """Register the project's grid sweeper with Hydra by hand (``Plugins.instance().register``,
    Hydra's documented way). Hydra finds plugins by listing the ``hydra_plugins`` namespace
    package, which an editable install's import hook may not list; importing the class
    by its name works either way, so ``hydra/sweeper=harness`` never depends on that scan."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.harness_sweeper import HarnessSweeper

    Plugins.instance().register(HarnessSweeper)


def _drop_lookup_errors(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(("Error getting class", "Error getting callable", "Error getting object"))


def _restore(value: str | None) -> None:
    if value is None:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    else:
        os.environ["HYDRA_FULL_ERROR"] = value


def _config_line(exc: BaseException) -> str | None:
    from harness.experiment.errors import hydra_error_line

    if isinstance(exc, ConfigError):
        return str(exc)
    return hydra_error_line(exc)


def _report(exc: BaseException) -> None:
    """Print ``exc`` as Hydra reports a failed job, without Hydra's private reporting function.

    The traceback starts below Hydra's ``run_job`` (the frames of this command and of Hydra's
    dispatch are cut) and stops before the first OmegaConf frame, followed by a blank line and
    ``Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.``; when no
    ``run_job`` frame is in the traceback (an error before the job started) it is printed
    whole, without that line. Chained exceptions (``__cause__``, ``__context__``) are printed
    whole, as Python prints them. The caller exits 1 (with ``HYDRA_FULL_ERROR=1`` the error is
    re-raised before this is reached: Python's own report of the whole traceback).
    """
    import traceback

    te = traceback.TracebackException.from_exception(exc)
    frames = list(te.stack)
    below_job = [i + 1 for i, frame in enumerate(frames) if frame.name == "run_job" and _in_package(frame.filename, hydra)]
    if not below_job:
        sys.stderr.write("".join(te.format()))
        return
    import omegaconf

    start = below_job[-1]
    end = next((i for i in range(start, len(frames)) if _in_package(frames[i].filename, omegaconf)), len(frames))
    te.stack = traceback.StackSummary.from_list(frames[start:end])
    sys.stderr.write("".join(te.format()))
    sys.stderr.write("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")


def _in_package(filename: str, package) -> bool:
    """True when ``filename`` is a source file of the imported ``package`` (its folder or below)."""
    folder = os.path.dirname(os.path.abspath(package.__file__))
    return os.path.abspath(filename).startswith(folder + os.sep)
