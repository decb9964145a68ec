"""Commands: thin entry points that parse arguments and call the library.

Each module here is one command of the console script ``harness <command> ...`` (also
``python -m harness <command>``; ``python -m harness.run`` is kept as the documented entry
point of a run):

========  ==========================================================================
run       one experiment, or a Hydra sweep with ``-m`` (:mod:`harness.experiment.run`)
compare   ``compare list``: logged runs; ``compare runs``: runs query by query (:mod:`harness.evaluation.compare`)
report    HTML report of a run, a sweep, or two runs side by side (:mod:`harness.experiment.report`)
check     the release gate (:mod:`harness.studies.gate`)
tune      an Optuna search over chunk settings (:mod:`harness.studies.tune`)
bench     speed benchmarks (:mod:`harness.studies.bench`)
generate  labelled queries for a corpus from an LLM (:mod:`harness.datasets.generate`)
server    a local MLflow tracking server (:mod:`harness.tracking.server`)
cache     size of the caches, or clear them (:mod:`harness.cache`)
datasets  validate and describe a dataset (:mod:`harness.datasets`)
========  ==========================================================================

Layer rule: a command imports library packages only, never another command; everything
a command computes is reachable from Python without it.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Sequence

#: Command name -> one-line summary (``harness --help``).
COMMANDS: dict[str, str] = {
    "run": "run one experiment, or a sweep with -m (Hydra overrides: chunker=semantic chunker.threshold=0.8)",
    "compare": "list the experiment's runs, or compare runs query by query with paired tests",
    "report": "HTML report of a run (RUN_ID), two runs side by side (RUN_A RUN_B) or a sweep (--sweep PARENT_ID)",
    "check": "release gate: re-run the candidate settings and test them against the baseline",
    "tune": "Optuna search over chunk settings; every trial is an MLflow run",
    "bench": "speed benchmarks (ratios measured side by side)",
    "generate": "write labelled queries for a corpus with an LLM (verified exact spans)",
    "server": "start a local MLflow tracking server",
    "cache": "show the size of the caches, or clear them",
    "datasets": "validate a dataset and print its statistics",
}


#: Help text of the ``--tracking-uri`` option of the commands that read runs (``compare``, ``report``).
TRACKING_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the project store)"


def add_tracking_uri(parser) -> None:
    """Add ``--tracking-uri`` (default None, read with :func:`tracking_uri`) to an ``argparse`` parser."""
    parser.add_argument("--tracking-uri", default=None, help=TRACKING_URI_HELP)


def tracking_uri(given: str | None) -> str:
    """``given`` when set, else the URI runs log to (:func:`harness.tracking.tracker.resolve_tracking_uri`:
    ``$MLFLOW_TRACKING_URI``, else the project's store under the project root)."""
    from harness.experiment.build import PROJECT_ROOT
    from harness.tracking.tracker import resolve_tracking_uri

    return given or resolve_tracking_uri(None, PROJECT_ROOT)


def format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the harness's commands print it: ``warning: <message>`` on one line
    (whitespace and line breaks folded), never the source line Python adds. A category other
    than ``UserWarning`` (what the harness warns with) keeps its name and origin:
    ``warning: <message> (FutureWarning, transformers/x.py:12)``. Same arguments as
    :func:`warnings.formatwarning`, which :func:`prepare_process` replaces with it."""
    text = " ".join(str(message).split())
    if category is UserWarning:
        return f"warning: {text}\n"
    where = "/".join(str(filename).replace("\\", "/").split("/")[-2:])
    return f"warning: {text} ({getattr(category, '__name__', category)}, {where}:{lineno})\n"


def prepare_process() -> None:
    """Process defaults every command sets before importing the heavy libraries.

    Offline model loading (the weights come from an installed package), no tokenizer
    thread pools forked into workers, no usage statistics from Ray. Values the user set
    in the environment win (``os.environ.setdefault``). Warnings print as one line
    (:func:`format_warning`; only the formatting changes: filters, and the recording of
    ``warnings.catch_warnings(record=True)``, are untouched).
    """
    warnings.formatwarning = format_warning
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


#: Hydra flags of ``harness run`` that only print (help, config, info) and log nothing.
_PRINT_ONLY = ("-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion")


def start_tracking_early(argv: Sequence[str]) -> None:
    """Start the tracking worker (:func:`harness.tracking.worker.start_early`) before ``harness
    run ARGV`` imports Hydra and composes its config, unless ARGV only asks Hydra to print
    something. Call it at program start, after :func:`prepare_process` (the worker inherits
    the environment)."""
    if any(a in _PRINT_ONLY or a.startswith(("--cfg=", "--info=")) for a in argv):
        return
    from harness.tracking.worker import start_early

    given = [a.partition("=")[2] for a in argv if a.lstrip("+").startswith("tracking.uri=")]
    start_early(given[-1] if given else os.environ.get("MLFLOW_TRACKING_URI"))


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: harness <command> [arguments]", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items()]
    lines += ["", "harness <command> --help shows a command's arguments (run, generate: Hydra's --help)."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script ``harness``: dispatch ``argv[0]`` to ``harness.cli.<command>.main``.

    Returns the command's exit code; 0 for ``--help``, 2 for an unknown command (the message
    names the closest command name).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"harness: unknown command {name!r}{hint} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    prepare_process()
    if name == "run":
        start_tracking_early(rest)
    module = importlib.import_module(f"harness.cli.{name}")
    return module.run_command(rest)
