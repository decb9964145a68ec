"""Hydra callback giving every multirun sweep one MLflow parent run, with each job's run
nested under it.

Registered in ``conf/config.yaml`` under ``hydra.callbacks``. Life of a parent run:

* ``on_multirun_start`` (the sweep's main process, before any job): plan the jobs
  (:func:`plan_sweep`: a setting given twice, a value listed twice, an empty sweep or an
  interval under the grid sweeper are refused here, as :class:`SweepRefused`, exit 2,
  before any run or job exists), close RUNNING parents
  of dead sweeps in the experiment (:meth:`harness.tracking.tracker.Tracker.close_dead_sweeps`),
  open the parent in the experiment of the base config (``tracking.experiment`` or the
  dataset name), named ``tracking.sweep_name`` or ``sweep <the swept overrides>``, tagged
  with the plan (``sweep.jobs``, ``sweep.grid``; the artifact ``sweep_plan.json`` lists
  every job), and write its id and job count to ``<hydra.sweep.dir>/mlflow_sweep.json``. Jobs read that file
  (:func:`parent_for_job`), so it reaches joblib and Ray workers on the same machine, and
  tag their run with ``mlflow.parentRunId`` and ``harness.sweep_job``; a job skipped by
  resume records ``sweep.skipped.<job>`` on the parent instead of creating a run, a job
  whose configuration was RUNNING in another live process ``sweep.busy.<job>`` (that run),
  a job refused for an invalid configuration ``sweep.invalid.<job>`` (its name and error).
* ``on_multirun_end`` (every job returned): summary (:func:`finish_sweep`; printed as a
  table, best first, ending with the best job: :func:`summary_text`), then FINISHED; when a
  job had an invalid configuration the sweep then exits 2, when a job was busy with
  :data:`harness.tracking.tracker.EXIT_BUSY`.
* Hydra exits without ``on_multirun_end`` when a job failed (its sweepers re-raise a job's
  error once the batch is done, exit code 1), on Ctrl-C, SIGTERM or any other exception:
  an ``atexit`` hook writes the summary and closes the parent FAILED (KILLED after Ctrl-C
  or SIGTERM), and closes children still RUNNING as KILLED. Only SIGKILL or a power cut
  leaves it RUNNING; the next sweep in the experiment closes it (KILLED, ``harness.stale``).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import itertools
import json
import math
import os
import re
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.evaluation.metrics import families as metric_families
from harness.params import is_int, is_number

#: File in ``hydra.sweep.dir`` naming the sweep's parent run (``run_id``, ``tracking_uri``, ``experiment_id``, ``pid``)
#: and the planned job count (``jobs``: :attr:`SweepPlan.n_jobs`, null when unknown).
PARENT_FILE = "mlflow_sweep.json"

#: Longest generated parent run name (characters); a longer one is cut and ends in ``... <hash>``.
MAX_NAME = 250

#: Overrides left out of a parent run's name: where and how runs are recorded and cached,
#: progress bars (settings that change no number a run computes; a subset of
#: ``harness.experiment.build.HASH_NEUTRAL``, checked by a test).
NAME_NEUTRAL = ("tracking", "hydra", "paths", "resume", "cache", "sweep", "embedding.show_progress", "retriever.show_progress")

#: Prefix of the parent's metric holding the best job's objective: ``sweep.best_recall_at_5``
#: (after the jobs' own ``recall_at_5`` in the UI's alphabetical metric lists).
BEST_PREFIX = "sweep.best_"

#: Metric families copied from each child into the sweep summary (every k), in column order:
#: the registry's ``sweep`` families (:func:`harness.evaluation.metrics.families`).
_FAMILY_ORDER = metric_families("sweep")
_METRIC_COLUMNS = re.compile(rf"^({'|'.join(_FAMILY_ORDER)})_at_\d+$")


#: ``hydra.sweeper._target_`` of Hydra's grid sweeper (the one whose jobs a plan lists).
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"

#: Artifact of a sweep's parent run holding its :class:`SweepPlan` (keys, values, jobs).
PLAN_FILE = "sweep_plan.json"

#: ``hydra.sweeper._target_`` of the project's grid sweeper (``conf/hydra/sweeper/harness.yaml``,
#: the default; :mod:`harness.studies.screen`): the basic sweeper's jobs, or a screening sweep.
GRID_SWEEPER = "hydra_plugins.harness_sweeper.HarnessSweeper"

#: File in ``hydra.sweep.dir`` (and artifact of the parent run) where a screening sweep
#: records its stages: the grid, the proxy jobs with their objective, the confirmed jobs
#: with the proxy's and the configured model's objective (:mod:`harness.studies.screen`).
SCREEN_FILE = "sweep_screen.json"

#: Tag of a screening sweep's child run naming its stage (``screen`` or ``confirm``).
STAGE_TAG = "harness.sweep_stage"


class SweepPlanError(ValueError):
    """A multirun whose jobs would not be the ones typed: one line naming the override and
    what to type instead (raised by :func:`plan_sweep`)."""


class SweepRefused(SystemExit):
    """Raised by :meth:`SweepRunCallback.on_multirun_start` for a :class:`SweepPlanError`,
    before any MLflow run, job or job folder exists. A ``SystemExit`` with code 2, because
    Hydra turns an ``Exception`` raised in a callback into a warning and goes on; the
    message is :attr:`line` (``harness run`` prints it as one line on stderr)."""

    def __init__(self, line: str) -> None:
        super().__init__(2)
        self.line = line


@dataclass(frozen=True)
class SweepPlan:
    """The jobs of one multirun, worked out once from its overrides (:func:`plan_sweep`).

    Everything a sweep reports about its size and grid comes from here: the ``job i/N``
    lines (``N`` = :attr:`n_jobs`), the parent run's name (:attr:`lines`), and its tags
    ``sweep.jobs`` and ``sweep.grid`` (:meth:`grid_text`) and artifact ``sweep_plan.json``
    (:meth:`to_dict`).

    Attributes:
        sweeper: ``hydra.sweeper._target_``.
        axes: ``((key, values), ...)`` for every key of the basic sweeper's product, in
            its order (sweeper params first, then the command line; a command-line
            override of a param's key takes the param's place); values are override
            strings (``"128"``, ``"'a b'"``). Empty under another sweeper.
        swept: the axes given as sweeps (a list, ``choice``, ``range``, ``glob``).
        lines: the swept overrides as typed (``chunker.chunk_size=128,256``).
        jobs: every job's overrides (``("chunker.chunk_size=128", ...)``) in launch order,
            or None when they are not known in advance (another sweeper; ``glob`` without
            Hydra's config loader).
        ordered: False when a ``shuffle(...)`` sweep makes the launch order random (the
            jobs are then the same set in another order).
    """

    sweeper: str
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    swept: tuple[tuple[str, tuple[str, ...]], ...]
    lines: tuple[str, ...]
    jobs: tuple[tuple[str, ...], ...] | None
    ordered: bool = True

    @property
    def n_jobs(self) -> int | None:
        """Number of jobs, or None when unknown (never a guess)."""
        return None if self.jobs is None else len(self.jobs)

    def grid_text(self) -> str:
        """The swept keys with their values as they run: ``retriever=bm25 chunker.chunk_size=100,150``
        (a ``glob``/``range`` expanded); ``""`` when nothing is swept or the values are not known."""
        return " ".join(f"{key}={','.join(values)}" for key, values in self.swept)

    def to_dict(self) -> dict:
        """``{"sweeper", "n_jobs", "ordered", "axes": {key: values}, "swept": {key: values}, "jobs": [[override, ...], ...]}``."""
        return {
            "sweeper": self.sweeper,
            "n_jobs": self.n_jobs,
            "ordered": self.ordered,
            "axes": {k: list(v) for k, v in self.axes},
            "swept": {k: list(v) for k, v in self.swept},
            "jobs": None if self.jobs is None else [list(j) for j in self.jobs],
        }


def _plain_key(override) -> str:
    """The setting an override addresses, without its ``+``/``++``/``~`` prefix (``chunker.chunk_size``, ``db@pkg``)."""
    return override.key_or_group + (f"@{override.package}" if override.package else "")


def plan_sweep(task: Sequence[str], params: Mapping[str, Any] | None = None, sweeper: str = BASIC_SWEEPER, config_loader=None) -> SweepPlan:
    """The jobs a multirun will launch, or :class:`SweepPlanError` when they would not be
    the ones typed. The one place a sweep's job list is made.

    Refused (one line each, naming the override and what to type instead):

    * a setting given twice on the command line (``chunker.chunk_size=128,256 ...
      chunker.chunk_size=512``): Hydra's basic sweeper keeps only the last one, so the
      first one's values would silently not run (any sweeper);
    * with the basic sweeper: a value listed twice in one sweep (``128,256,128``, or
      ``fixed,'fixed'``: equal once parsed; two identical jobs), a sweep with no values (``range(5,5)``: no job), and an
      ``interval(...)`` sweep (only a sampling sweeper such as Optuna draws from one).

    A sweeper param (``hydra.sweeper.params``, e.g. from ``experiment=``) overridden on the
    command line is not a repetition: the command line's value replaces the param's sweep,
    as Hydra documents. With the basic sweeper the jobs are the Cartesian product of the
    axes, the last axis varying fastest (worked out here, with Hydra's public override
    parser only); ``tests/faults/test_fault_sweeps.py`` checks over generated override lists
    that they are the jobs of Hydra's own ``BasicSweeper.split_arguments``, in its order.

    Args:
        task: the command-line overrides (``hydra.overrides.task``), in order.
        params: ``hydra.sweeper.params`` (key -> override value), or None.
        sweeper: ``hydra.sweeper._target_``; another sweeper than the basic one (or the
            project's :data:`GRID_SWEEPER`, which launches the same jobs) gets only the
            repeated-key check, and an unknown job list.
        config_loader: Hydra's config loader, to expand ``glob(...)`` over a config group
            (without it a ``glob`` leaves the job list unknown).

    Raises:
        SweepPlanError: as above.
        hydra.errors.OverrideParseException: an override Hydra's grammar cannot read.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=config_loader)
    parsed = parser.parse_overrides([str(a) for a in task])
    first: dict[str, Any] = {}
    for override in parsed:
        key = _plain_key(override)
        if key in first:
            raise SweepPlanError(
                f"{key}: given twice ({first[key].input_line} and {override.input_line}); only the last one would take effect: "
                f"give the key once, with all its values in one sweep{_merged(first[key], override)}"
            )
        first[key] = override
    param_lines = [f"{k}={v}" for k, v in (params or {}).items()]
    basic = str(sweeper).endswith("BasicSweeper") or str(sweeper) == GRID_SWEEPER
    if not basic:
        try:
            param_parsed = parser.parse_overrides(param_lines)
            lines = [o.input_line for o in [*param_parsed, *parsed] if o.is_sweep_override()]
        except Exception:  # noqa: BLE001 - another sweeper's own syntax: named as written
            lines = param_lines + [o.input_line for o in parsed if o.is_sweep_override()]
        return SweepPlan(str(sweeper), (), (), tuple(lines), None)
    overrides = [*parser.parse_overrides(param_lines), *parsed]
    axes: dict[str, tuple[Any, list[str] | None]] = {}
    for override in overrides:  # Hydra's order: a later override of a key takes its place
        axes[override.get_key_element()] = (override, None)
    known, ordered = True, True
    for key, (override, _) in list(axes.items()):
        if not override.is_sweep_override():
            axes[key] = (override, [override.get_value_element_as_str()])
            continue
        if not override.is_discrete_sweep():
            raise SweepPlanError(
                f"{override.input_line}: the basic sweeper runs a list of values and cannot draw from an interval; "
                "sweep choice(...) or range(...) values, or use a sampling sweeper (hydra/sweeper=optuna)"
            )
        if getattr(override.value(), "shuffle", False):
            ordered = False
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # noqa: BLE001 - glob(...) without the config loader: not enumerable here
            known = False
            axes[key] = (override, None)
            continue
        if not values:
            raise SweepPlanError(f"{override.input_line}: the sweep has no values, so no job would run; give at least one value")
        repeated = _repeated_value(override)
        if repeated is not None:
            raise SweepPlanError(f"{override.input_line}: {repeated} is listed twice (two identical jobs); list each value once")
        changed = _value_changed_on_the_way(override, values, parser)
        if changed is not None:
            raise SweepPlanError(changed)
        axes[key] = (override, values)
    swept = tuple((k, tuple(v)) for k, (o, v) in axes.items() if o.is_sweep_override() and v is not None)
    lines = tuple(o.input_line for o, _ in axes.values() if o.is_sweep_override())
    if not known:
        return SweepPlan(str(sweeper), tuple((k, tuple(v)) for k, (_, v) in axes.items() if v is not None), swept, lines, None, ordered)
    jobs = tuple(itertools.product(*[[f"{k}={v}" for v in values] for k, (_, values) in axes.items()]))
    return SweepPlan(str(sweeper), tuple((k, tuple(v)) for k, (_, v) in axes.items()), swept, lines, jobs, ordered)


def _repeated_value(override) -> str | None:
    """The first value of a discrete sweep that equals an earlier one once parsed (``fixed``
    and ``'fixed'`` are one value; ``128`` and ``'128'`` are not: an int and a string), else None."""
    from hydra.core.override_parser.types import ChoiceSweep, QuotedString

    sweep = override.value()
    if not isinstance(sweep, ChoiceSweep):  # range(...) steps and glob(...) matches never repeat
        return None
    seen: set[str] = set()
    for value in sweep.list:
        value = value.text if isinstance(value, QuotedString) else value
        key = f"{type(value).__name__}:{value!r}"
        if key in seen:
            return str(value)
        seen.add(key)
    return None


def _value_changed_on_the_way(override, values: list[str], parser) -> str | None:
    """One line when a swept value would reach its job as another value, else None.

    Hydra's basic sweeper hands each job its value as text (``key=<text>``) that the job
    parses again; for some values that text reads back differently: ``choice('0')`` loses its
    quotes (the job gets the int 0, not the string '0'), ``choice('^')`` gives text the
    grammar cannot read. Each value is parsed back here exactly as the job will parse it and
    compared with the value typed (type and content).
    """
    from hydra.core.override_parser.types import QuotedString, Transformer

    def plain(value):
        if isinstance(value, QuotedString):
            return value.text
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        return value

    def same(a, b) -> bool:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return type(a) is type(b) and a == b

    key = override.get_key_element()
    if getattr(override.value(), "shuffle", False):  # shuffle(...): each pass draws another order; pair the values in typed order
        override = copy.deepcopy(override)
        override.value().shuffle = False
    try:
        typed = [plain(v) for v in override.sweep_iterator(transformer=Transformer.identity)]
        values = list(override.sweep_string_iterator())
    except Exception:  # noqa: BLE001 - not enumerable without the config loader: nothing to compare here
        return None
    for value, text in zip(typed, values):
        try:
            back = plain(parser.parse_overrides([f"{key}={text}"])[0].value())
        except Exception:  # noqa: BLE001 - the job's own override would not parse
            back = _UNREADABLE
        if back is _UNREADABLE or not same(value, back):
            got = "text Hydra's grammar cannot read" if back is _UNREADABLE else f"{back!r} ({type(back).__name__})"
            return (
                f"{override.input_line}: Hydra's basic sweeper would hand its job {key}={text}, which reads back as {got} "
                f"instead of the value typed, {value!r} ({type(value).__name__}); write the sweep as a plain quoted list "
                f"(e.g. {key}='{value}',...) or run that value as a single run"
            )
    return None


_UNREADABLE = object()


def _merged(a, b) -> str:
    """``", e.g. key=v1,v2,v3"`` joining the values of two overrides of one key, when both can be listed."""
    values: list[str] = []
    for override in (a, b):
        try:
            found = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.get_value_element_as_str()]
        except Exception:  # noqa: BLE001 - not enumerable (interval, glob): no example
            return ""
        values += [v for v in found if v not in values]
    return f", e.g. {b.get_key_element()}={','.join(values)}" if values else ""


def sweep_overrides(hydra_cfg: DictConfig) -> list[str]:
    """The sweeping overrides of a multirun (``chunker.chunk_size=100,150``), sweeper params first.

    Args:
        hydra_cfg: the ``hydra`` node of a multirun config (or of ``multirun.yaml``).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (hydra_cfg.sweeper.get("params") or {}).items()]
    args += [str(a) for a in hydra_cfg.overrides.task]
    return [o.input_line for o in OverridesParser.create().parse_overrides(args) if o.is_sweep_override()]


def plan_of(hydra_cfg: DictConfig, config_loader=None) -> SweepPlan:
    """:func:`plan_sweep` of a multirun's ``hydra`` node (its task overrides, sweeper params and sweeper)."""
    return plan_sweep(
        [str(a) for a in hydra_cfg.overrides.task], hydra_cfg.sweeper.get("params") or {}, str(hydra_cfg.sweeper.get("_target_", "")), config_loader
    )


def count_jobs(hydra_cfg: DictConfig) -> int | None:
    """Number of jobs of a basic-sweeper multirun (:attr:`SweepPlan.n_jobs` of :func:`plan_of`).

    None under another sweeper (Optuna decides as it goes), when an override cannot be
    expanded without the config loader (``glob(...)``) or when the plan refuses the sweep.
    """
    try:
        return plan_of(hydra_cfg).n_jobs
    except Exception:  # noqa: BLE001 - a count we cannot make is unknown, not an error
        return None


def fixed_overrides(hydra_cfg: DictConfig) -> list[str]:
    """The overrides of a multirun that are not swept (``retriever=bm25``), sweeper params
    first, as typed, without those of :data:`NAME_NEUTRAL` (``tracking.uri=...``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (hydra_cfg.sweeper.get("params") or {}).items()]
    args += [str(a) for a in hydra_cfg.overrides.task]
    out = []
    for o in OverridesParser.create().parse_overrides(args):
        key = o.key_or_group
        if o.is_sweep_override() or any(key == n or key.startswith(n + ".") or key.startswith(n + "/") for n in NAME_NEUTRAL):
            continue
        out.append(o.input_line)
    return out


def sweep_name(hydra_cfg: DictConfig, plan: SweepPlan | None = None) -> str:
    """Default parent run name: ``sweep`` + the swept overrides of ``plan`` (default: the
    plan of ``hydra_cfg``), or + the last two parts of the sweep folder when nothing is swept
    on the command line; then `` | `` + the fixed overrides (:func:`fixed_overrides`), so two
    sweeps of one grid on other settings get other names: ``sweep chunker.chunk_size=128,256 |
    retriever=bm25``. At most :data:`MAX_NAME` characters: a longer name is cut and ends in
    ``... `` + the first 8 hex characters of the sha256 of the whole name."""
    import hashlib

    if plan is None:
        try:
            parts = list(plan_of(hydra_cfg).lines)
        except Exception:  # noqa: BLE001 - a name is made for any sweep that runs
            parts = sweep_overrides(hydra_cfg)
    else:
        parts = list(plan.lines)
    if parts:
        name = "sweep " + " ".join(parts)
    else:
        folder = Path(str(hydra_cfg.sweep.dir))
        name = "sweep " + "/".join(folder.parts[-2:])
    try:
        fixed = fixed_overrides(hydra_cfg)
    except Exception:  # noqa: BLE001 - as above: the name never stops a sweep
        fixed = []
    if fixed:
        name += " | " + " ".join(fixed)
    if len(name) <= MAX_NAME:
        return name
    return name[: MAX_NAME - 12] + "... " + hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]


def parent_for_job(tracking_uri: str) -> tuple[str, int] | None:
    """``(parent run id, 1-based job number)`` for a Hydra multirun job, else None.

    Read from ``<hydra.sweep.dir>/mlflow_sweep.json`` (written by :class:`SweepRunCallback`).
    None outside a multirun, without that file, or when the file names another tracking
    store than ``tracking_uri`` (the job's run could not point at a parent in another store).
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    path = Path(str(hc.sweep.dir)) / PARENT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("tracking_uri") != tracking_uri or not data.get("run_id"):
        return None
    return str(data["run_id"]), int(hc.job.num) + 1


def sweep_settings(config: DictConfig, plan: SweepPlan):
    """The sweep's statistics settings, checked once before any job: ``(TopSetSettings of
    tracking.top_set, tracking.sweep_baseline)``.

    ``tracking.sweep_baseline`` is null, a job number (1 to the planned job count) or a run id
    or run name (resolved when the report is made).

    Raises:
        SweepPlanError: one line naming ``tracking.top_set.<key>`` or ``tracking.sweep_baseline``.
    """
    from omegaconf import OmegaConf

    from harness.evaluation.stats import TopSetSettings

    tracking = config.get("tracking") or {}
    node = tracking.get("top_set")
    given = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    if given is not None and not isinstance(given, Mapping):
        raise SweepPlanError(f"tracking.top_set: expected a mapping of alpha, margin, second_metric, n_resamples, seed, got {given!r}")
    try:
        settings = TopSetSettings.from_mapping(given)
    except (TypeError, ValueError) as exc:
        raise SweepPlanError(str(exc)) from None
    baseline = tracking.get("sweep_baseline")
    if baseline is not None:
        if not is_int(baseline) and not (isinstance(baseline, str) and baseline.strip()):
            raise SweepPlanError(f"tracking.sweep_baseline: expected null, a job number or a run id or name, got {baseline!r}")
        if isinstance(baseline, int) and not (1 <= baseline <= (plan.n_jobs or baseline)):
            raise SweepPlanError(f"tracking.sweep_baseline: job {baseline} does not exist; this sweep has jobs 1 to {plan.n_jobs}")
    return settings, baseline


def screen_settings(config: DictConfig, plan: SweepPlan):
    """The sweep's screening settings (``sweep.screen``, ``sweep.keep``), checked once before
    any job: a :class:`harness.evaluation.screening.ScreenSettings`.

    Raises:
        SweepPlanError: one line naming the ``sweep.*`` setting: an unknown key or proxy
            (with the closest known one), a ``keep`` that is not an int >= 1, a ``sweep.*``
            setting given as a sweep, or screening under a sweeper other than
            :data:`GRID_SWEEPER` or over jobs not known in advance.
    """
    from omegaconf import OmegaConf

    from harness.evaluation.screening import ScreenError, ScreenSettings

    for key, _ in plan.swept:
        if key == "sweep" or key.startswith("sweep."):
            raise SweepPlanError(f"{key}: is a setting of the whole sweep and cannot be swept; give one value")
    node = config.get("sweep")
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    try:
        settings = ScreenSettings.from_mapping(data)
    except ScreenError as exc:
        raise SweepPlanError(str(exc)) from None
    if settings.screen is not None:
        if plan.sweeper != GRID_SWEEPER:
            raise SweepPlanError(
                f"sweep.screen={settings.screen}: screening needs the project's grid sweeper (hydra/sweeper=harness), not {plan.sweeper}; "
                "drop the hydra/sweeper override or sweep.screen"
            )
        if plan.jobs is None:
            raise SweepPlanError(f"sweep.screen={settings.screen}: the grid's jobs are not known in advance, so there is nothing to screen")
    return settings


def read_screening(sweep_dir: Path | str | None) -> dict | None:
    """The stages a screening sweep recorded in ``<sweep_dir>/`` :data:`SCREEN_FILE`, or None
    (an exact sweep, or no such file)."""
    if sweep_dir is None:
        return None
    try:
        return json.loads((Path(sweep_dir) / SCREEN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def job_stages(screening: Mapping[str, Any]) -> dict[int, str]:
    """Job number -> ``"screen"`` or ``"confirm"`` of a screening sweep's record."""
    out = {int(e["job"]): "screen" for e in screening.get("screen", [])}
    out.update({int(e["job"]): "confirm" for e in screening.get("confirm", [])})
    return out


def screening_summary(screening: Mapping[str, Any]) -> dict[str, Any]:
    """What a screening sweep says about its proxy, from its record (:data:`SCREEN_FILE`).

    Returns:
        ``{"n_screen", "n_confirm", "kendall_tau", "spearman_rho"`` (over the confirmed jobs
        with both values; NaN when undefined: fewer than two, or a constant side),
        ``"best_job"`` (the confirmed best's job number, None without a value),
        ``"best_proxy_rank"`` (its rank in the proxy's order, 1 = the proxy's best),
        ``"proxy_best_confirmed"`` (the proxy's best grid job is the confirmed best)``}``.
    """
    from harness.evaluation.screening import agreement

    confirm = list(screening.get("confirm", []))
    lower = bool(screening.get("lower_is_better", False))
    proxy = [float(e.get("proxy_objective", math.nan)) for e in confirm]
    final = [float(e.get("objective", math.nan)) if e.get("objective") is not None else math.nan for e in confirm]
    agree = agreement(proxy, final, lower)
    best = agree["best"]
    return {
        "n_screen": len(screening.get("screen", [])),
        "n_confirm": len(confirm),
        "n_pairs": agree["n"],
        "kendall_tau": agree["kendall_tau"],
        "spearman_rho": agree["spearman_rho"],
        "best_job": None if best is None else int(confirm[best]["job"]),
        "best_grid_job": None if best is None else int(confirm[best]["grid_job"]),
        "best_proxy_rank": agree["best_proxy_rank"],
        "proxy_best_confirmed": None if best is None else int(confirm[best].get("proxy_rank", 0)) == 1,
    }


def record_screening(tracker, parent_run_id: str, screening: Mapping[str, Any], frame=None) -> dict[str, Any]:
    """Record a screening sweep's stages on its parent run and its children.

    Logged on the parent: tags ``sweep.screen.jobs_screen`` / ``_confirm`` (job numbers),
    ``sweep.screen.best_job``, ``sweep.screen.best_proxy_rank``,
    ``sweep.screen.proxy_best_confirmed`` (``true``/``false``); metrics
    ``sweep.screen.kendall_tau`` and ``sweep.screen.spearman_rho`` (when defined) and
    ``sweep.screen.best_proxy_rank``; the artifact :data:`SCREEN_FILE` (the record itself,
    plus the summary under ``"summary"``). Each child run with a job number gets the tag
    :data:`STAGE_TAG`. Returns the :func:`screening_summary`.
    """
    from harness.tracking.tracker import JOB_TAG

    summary = screening_summary(screening)
    stages = job_stages(screening)
    tracker.run_id = parent_run_id
    tags: dict[str, Any] = {
        "sweep.screen.jobs_screen": ",".join(str(j) for j, s in sorted(stages.items()) if s == "screen"),
        "sweep.screen.jobs_confirm": ",".join(str(j) for j, s in sorted(stages.items()) if s == "confirm"),
    }
    for key in ("best_job", "best_proxy_rank"):
        if summary[key] is not None:
            tags[f"sweep.screen.{key}"] = summary[key]
    if summary["proxy_best_confirmed"] is not None:
        tags["sweep.screen.proxy_best_confirmed"] = str(summary["proxy_best_confirmed"]).lower()
    tracker.set_tags(tags)
    metrics = {
        f"sweep.screen.{k}": float(summary[k])
        for k in ("kendall_tau", "spearman_rho", "best_proxy_rank")
        if summary[k] is not None and math.isfinite(float(summary[k]))
    }
    if metrics:
        tracker.log_metrics(metrics)
    tracker.log_text(json.dumps({**screening, "summary": summary}, indent=1, default=float), SCREEN_FILE)
    for child in tracker.child_runs(parent_run_id):
        job = _job(child.data.tags.get(JOB_TAG))
        if job in stages:
            tracker.client.set_tag(child.info.run_id, STAGE_TAG, stages[job])
    tracker.run_id = parent_run_id
    return summary


def screening_lines(screening: Mapping[str, Any] | None) -> list[str]:
    """The console lines of a screening sweep: stage sizes, the rank agreement over the
    confirmed jobs and where the proxy ranked the confirmed best; ``[]`` for an exact sweep."""
    if screening is None:
        return []
    s = screening_summary(screening)

    def num(v) -> str:
        return "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.3f}"

    line = (
        f"screening by {screening.get('proxy')} ({' '.join(screening.get('proxy_overrides', []))}): {s['n_screen']} proxy job(s), "
        f"{s['n_confirm']} confirmed (sweep.keep={screening.get('keep')}); over the confirmed jobs Kendall tau {num(s['kendall_tau'])}, "
        f"Spearman rho {num(s['spearman_rho'])}"
    )
    if s["best_job"] is not None:
        line += f"; the confirmed best (job {s['best_job']}) was the proxy's #{s['best_proxy_rank']}"
    return [line]


def default_job(plan: SweepPlan, config: DictConfig) -> int | None:
    """The job (1-based) that runs the configuration the sweep would have run unswept: every
    swept setting at the value the composed configuration gives it without the sweep (the
    shipped defaults plus the command line's fixed overrides: ``chunker.chunk_size=254`` of the
    default recursive chunker, ``retriever=faiss``); None when no job does, or the jobs are not
    known in advance. A config group's value is its chosen option (``hydra.runtime.choices``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if not plan.jobs or not plan.swept:
        return None
    swept = {k for k, _ in plan.swept}
    choices = dict(config.hydra.runtime.choices) if "runtime" in config.hydra else {}
    parser = OverridesParser.create()
    for number, job in enumerate(plan.jobs, 1):
        try:
            overrides = parser.parse_overrides(list(job))
        except Exception:  # noqa: BLE001 - a value the parser cannot read again: no default job
            return None
        match = True
        for o in overrides:
            key = o.get_key_element()
            if key not in swept:
                continue
            value = o.value()
            if key in choices:
                base = choices[key]
            else:
                base = OmegaConf.select(config, key, default=None, throw_on_missing=False)
            value = getattr(value, "text", value)  # a quoted string
            if type(value) is not type(base) and not (is_number(value) and isinstance(base, (int, float))):
                match = False
            elif value != base:
                match = False
            if not match:
                break
        if match:
            return number
    return None


def lower_is_better(objective: str) -> bool:
    """True for objectives to minimise (``context_tokens@k``: text handed to the generator); every other metric is maximised."""
    return objective.split("@", 1)[0] == "context_tokens"


def finish_sweep(
    tracker,
    parent_run_id: str,
    status: str,
    objective: str,
    report: bool = True,
    on_summary: Callable[..., None] | None = None,
    top_settings=None,
    objective_png: Callable[..., bytes] | None = None,
    report_page: Callable[..., str] | None = None,
    screening: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Summarise a sweep on its parent run and close it with ``status``.

    Logged on the parent: tags ``sweep.jobs_finished``, ``_failed``, ``_killed``,
    ``_skipped``, ``_busy``, ``_invalid`` (counts; busy = RUNNING in another live process,
    the row names that run; invalid = refused for its configuration before a run was
    created, the row's ``error`` says why); ``sweep.best_run_id``/``_run_name``/``_job`` and the metric
    ``sweep.best_<objective key>`` (e.g. ``sweep.best_recall_at_5``) for the best FINISHED or skipped job
    (highest objective; lowest for ``context_tokens@k``); in a sweep over retrievers, a tag
    ``sweep.best_retriever.<chunking>`` per chunking naming its best retriever
    (:func:`best_retriever_per_chunker`); artifacts ``sweep_summary.csv``,
    the MLflow table ``sweep_summary.json`` (one row per job: job, run name, status, run id,
    objective, recall/precision/IoU/... at every k, chunk count, time, error; read with
    :func:`harness.tracking.runs.metrics_of`, so values kept in a job's metrics table count) and
    ``sweep_objective.png``; the top set (:func:`sweep_top_set`: the jobs not significantly
    worse than the best, tags ``sweep.top_set``, ``sweep.top_set_jobs``, ``sweep.top_set_size``,
    ``sweep.top_set_test``, ``sweep.tie_break.<metric key>``; the column ``top_set`` of the
    summary); with ``report`` the sweep report ``report.html`` (:func:`log_sweep_report`). With a status other than FINISHED, children still RUNNING are
    closed KILLED first. The parent is closed even when the summary fails (the failure is
    then the ``sweep.summary_error`` tag).

    Args:
        on_summary: called with the summary table (a DataFrame, the rows of
            ``sweep_summary.csv``), the row index of the best job (None when no job
            has a value) and the :class:`SweepTop` (None without a best job), e.g. to print
            them (:func:`summary_text`).
        top_settings: the :class:`harness.evaluation.stats.TopSetSettings` of the top set
            (``tracking.top_set``; default ones when None).
        objective_png: draws ``sweep_objective.png``: called as ``objective_png(labels,
            values, objective, best, notes, title)`` (one bar per job), returns PNG bytes
            (:func:`harness.reporting.charts.objective_png`); None: no figure.
        report_page: renders the sweep report: called as ``report_page(tracking_uri,
            parent_run_id, top_settings)``, returns the page
            (:func:`harness.experiment.report.sweep_report_page`); None: no report.

        screening: the stages of a screening sweep (the content of :data:`SCREEN_FILE`,
            :func:`read_screening`), or None. With it the summary gets a ``stage`` column
            (``screen``/``confirm``), the best job and the top set are taken from the
            confirmed jobs only (a proxy's objective is not the configured model's), and
            :func:`record_screening` records the stages and the rank agreement.

    Tracking renders nothing itself: the two renderers are handed in (by
    :class:`SweepRunCallback`, from its Hydra config).

    Returns:
        Job counts by status: ``{"FINISHED": n, "FAILED": n, "KILLED": n, "SKIPPED": n, "BUSY": n, "INVALID": n}``.
    """
    from harness.evaluation.metrics import mlflow_key
    from harness.tracking.tracker import BUSY_PREFIX, INVALID_PREFIX, JOB_TAG, MAX_TAG_VALUE, SKIPPED_PREFIX

    counts = {"FINISHED": 0, "FAILED": 0, "KILLED": 0, "SKIPPED": 0, "BUSY": 0, "INVALID": 0}
    tracker.run_id = parent_run_id
    try:
        import pandas as pd

        key = mlflow_key(objective)
        rows = []
        for child in tracker.child_runs(parent_run_id):
            state = child.info.status
            if state == "RUNNING" and status != "FINISHED":
                tracker.end("KILLED", child.info.run_id)
                state = "KILLED"
            rows.append(_row(child, _job(child.data.tags.get(JOB_TAG)), state, key, _values(tracker, child)))
        parent = tracker.get_run(parent_run_id)
        for tag, run_id in parent.data.tags.items():
            if tag.startswith(SKIPPED_PREFIX):
                try:
                    done = tracker.get_run(run_id)
                    rows.append(_row(done, _job(tag[len(SKIPPED_PREFIX) :]), "SKIPPED", key, _values(tracker, done)))
                except Exception:  # noqa: BLE001 - the finished run was deleted since
                    rows.append({"job": _job(tag[len(SKIPPED_PREFIX) :]), "run_name": "", "status": "SKIPPED", "run_id": run_id, key: math.nan})
            elif tag.startswith(BUSY_PREFIX):  # the row names the other process's run; its values are not ours to rank
                job = _job(tag[len(BUSY_PREFIX) :])
                try:
                    name = tracker.get_run(run_id).info.run_name or ""
                except Exception:  # noqa: BLE001 - that run was deleted since
                    name = ""
                rows.append({"job": job, "run_name": name, "status": "BUSY", "run_id": run_id, key: math.nan})
            elif tag.startswith(INVALID_PREFIX):  # refused before a run was created: the tag holds "<run name>: <error>"
                name, _, error = run_id.partition(": ")
                rows.append({"job": _job(tag[len(INVALID_PREFIX) :]), "run_name": name, "status": "INVALID", "run_id": "", key: math.nan, "error": error[:300]})
        for row in rows:
            if row["status"] in counts:
                counts[row["status"]] += 1
        tracker.set_tags({f"sweep.jobs_{s.lower()}": n for s, n in counts.items()})
        if rows:
            frame = pd.DataFrame(rows)
            metric_cols = sorted((c for c in frame.columns if _METRIC_COLUMNS.match(c)), key=_metric_order)
            tail = [c for c in ("retriever", "embedding", "chunks.n_chunks", "time.total_s", "error") if c in frame.columns]
            frame = frame[["job", "run_name", "status", "run_id", key, *[c for c in metric_cols if c != key], *tail]]
            frame = frame.sort_values(["job", "run_name"], kind="stable").reset_index(drop=True)
            ranked = frame
            if screening is not None:
                stages = job_stages(screening)
                frame.insert(1, "stage", [stages.get(int(j), "") for j in frame["job"]])
                ranked = frame[frame["stage"] == "confirm"]
                record_screening(tracker, parent_run_id, screening, frame)
            candidates = ranked[ranked["status"].isin(["FINISHED", "SKIPPED"]) & ranked[key].notna()]
            best = None
            if not candidates.empty:
                best = candidates[key].idxmin() if lower_is_better(objective) else candidates[key].idxmax()
                top = frame.loc[best]
                tracker.log_metrics({f"{BEST_PREFIX}{key}": float(top[key])})
                tracker.set_tags({"sweep.best_run_id": top["run_id"], "sweep.best_run_name": top["run_name"], "sweep.best_job": int(top["job"])})
                best_retrievers = best_retriever_per_chunker(candidates, key, lower_is_better(objective))
                if best_retrievers:
                    # MLflow tag keys allow letters, digits, _ - . space and /: "model2vec/static:all-MiniLM-L6-v2" loses its ":"
                    tracker.set_tags(
                        {re.sub(r"[^A-Za-z0-9_\-. /]", "_", f"sweep.best_retriever.{k}")[:250]: v[:MAX_TAG_VALUE] for k, v in best_retrievers.items()}
                    )
            top = None
            if best is not None:
                top = sweep_top_set(tracker, ranked, objective, top_settings)
                frame["top_set"] = [bool(top.result is not None and int(j) in top.result.members) for j in frame["job"]]
            if on_summary is not None:
                with contextlib.suppress(Exception):  # printing must never keep the parent open
                    on_summary(frame, None if best is None else int(best), top)
            tracker.log_dataframe_csv(frame, "sweep_summary.csv")
            tracker.log_table(frame, "sweep_summary.json")
            if objective_png is not None:
                labels = [f"{j} {n}" for j, n in zip(frame["job"], frame["run_name"])]
                values = [float(v) if s in ("FINISHED", "SKIPPED") else math.nan for v, s in zip(frame[key], frame["status"])]
                notes = ["" if s in ("FINISHED", "SKIPPED") else s for s in frame["status"]]
                title = f"{parent.info.run_name}: {objective} per job"
                tracker.log_bytes(objective_png(labels, values, objective, None if best is None else int(best), notes, title), "sweep_objective.png")
        if report and rows and report_page is not None:
            log_sweep_report(tracker, parent_run_id, report_page, top_settings)
    except Exception as exc:  # noqa: BLE001 - the parent must be closed whatever happens
        try:
            tracker.set_tags({"sweep.summary_error": f"{type(exc).__name__}: {exc}"[:MAX_TAG_VALUE]})
        except Exception:  # noqa: BLE001, S110 - the store itself is failing; still try to close
            pass
    tracker.end(status, parent_run_id)
    return counts


def log_sweep_report(tracker, parent_run_id: str, report_page: Callable[..., str], top_settings=None) -> None:
    """Log the sweep's HTML report, ``report_page(tracking_uri, parent_run_id, top_settings)``
    (see :func:`finish_sweep`), as ``report.html`` on its parent run. A failure is recorded
    as the tag ``sweep.report_error`` and never fails the sweep."""
    from harness.tracking.tracker import MAX_TAG_VALUE

    try:
        previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no download bars at the end of the sweep's output
        try:
            page = report_page(tracker.tracking_uri, parent_run_id, top_settings)
        finally:
            if previous is None:
                os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
            else:
                os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
        tracker.log_text(page, "report.html")
    except Exception as exc:  # noqa: BLE001 - the report is an extra: the sweep's result stands without it
        tracker.set_tags({"sweep.report_error": f"{type(exc).__name__}: {exc}"[:MAX_TAG_VALUE]})


@dataclass(frozen=True)
class SweepTop:
    """A sweep's top set as the summary shows it (:func:`sweep_top_set`).

    Attributes:
        result: the :class:`harness.evaluation.stats.TopSet` (keys: job numbers), or None
            when it could not be computed.
        breakers: the :class:`harness.evaluation.compare.TieBreaker` rules (empty for a set of one).
        names: job number -> run name.
        error: why the top set is missing (one line), else "".
    """

    result: Any
    breakers: tuple
    names: Mapping[int, str]
    error: str = ""


def sweep_top_set(tracker, frame, objective: str, settings=None) -> SweepTop:
    """The top set of a finished sweep: the FINISHED or skipped jobs with a value, each job's
    ``per_query.csv`` read back, tested with :func:`harness.evaluation.compare.top_set_of_runs`
    (the one boundary: same dataset, same queries), and tagged on the parent run:
    ``sweep.top_set`` (``job 3 <name> <mean>, ...``), ``sweep.top_set_jobs`` (``3,7``),
    ``sweep.top_set_size``, ``sweep.top_set_test`` (test, alpha, margin, correction, queries)
    and, for a set larger than one, ``sweep.tie_break.<metric key>`` (``job 7 <name> (<value>)``)
    per rule of :func:`harness.evaluation.compare.tie_breakers`. When the tables cannot be paired
    (another dataset, other queries, a missing table) the tag ``sweep.top_set_error`` says why
    and the result is None: the sweep still reports its best job.

    Args:
        tracker: the parent's :class:`harness.tracking.tracker.Tracker` (current run: the parent).
        frame: the summary table of :func:`finish_sweep`.
        objective: ``metrics.objective``.
        settings: :class:`harness.evaluation.stats.TopSetSettings` (None: the defaults).
    """
    from harness.evaluation.compare import CompareError, second_metric_for, tie_breakers, top_set_of_runs
    from harness.evaluation.metrics import mlflow_key
    from harness.evaluation.stats import TopSetSettings, query_mean
    from harness.tracking.runs import load_run
    from harness.tracking.tracker import MAX_TAG_VALUE

    settings = settings or TopSetSettings()
    key = mlflow_key(objective)
    done = frame[frame["status"].isin(["FINISHED", "SKIPPED"]) & frame[key].notna()]
    names = {int(r["job"]): str(r["run_name"]) for _, r in done.iterrows()}
    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no download bars at the end of the sweep's output
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = {int(r["job"]): load_run(tracker.tracking_uri, str(r["run_id"]), tmp) for _, r in done.iterrows()}
        result = top_set_of_runs(runs, objective, settings, lower=lower_is_better(objective))
    except (CompareError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:MAX_TAG_VALUE]
        tracker.set_tags({"sweep.top_set_error": error})
        return SweepTop(None, (), names, error)
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
    breakers: tuple = ()
    if len(result.members) > 1:
        k = objective.rsplit("@", 1)[1] if "@" in objective and objective.rsplit("@", 1)[1].isdigit() else "5"
        wanted = [f"context_tokens@{k}", second_metric_for(objective, settings.second_metric)]
        values: dict[int, dict[str, float]] = {}
        for job in result.members:
            table = runs[job].per_query
            values[job] = {m: query_mean(pd_numeric(table[m]), m)[0] for m in wanted if m in table.columns}
            row = done[done["job"] == job]
            if "chunks.n_chunks" in row.columns and row["chunks.n_chunks"].notna().any():
                values[job]["chunks.n_chunks"] = float(row["chunks.n_chunks"].iloc[0])
        breakers = tuple(tie_breakers(result.members, values, objective, settings.second_metric))
    top = SweepTop(result, breakers, names)
    tags = {
        "sweep.top_set": _cut(", ".join(f"job {j} {names[j]} {result.means[j]:.4f}" for j in result.members), MAX_TAG_VALUE),
        "sweep.top_set_jobs": _cut(",".join(str(j) for j in result.members), MAX_TAG_VALUE),
        "sweep.top_set_size": len(result.members),
        "sweep.top_set_test": f"{settings.test_text()}, {result.n_queries} queries",
    }
    for b in breakers:
        if b.choice is not None:
            tags[re.sub(r"[^A-Za-z0-9_\-. /]", "_", f"sweep.tie_break.{mlflow_key(b.metric)}")] = _cut(
                f"job {b.choice} {names[b.choice]} ({b.values[b.choice]:.4f})", MAX_TAG_VALUE
            )
    tracker.set_tags(tags)
    return top


def pd_numeric(column):
    """A per-query column as floats (a value that is not a number becomes NaN, scored 0 by :func:`harness.evaluation.stats.query_mean`)."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def top_set_lines(top: SweepTop | None, objective: str) -> list[str]:
    """The console lines of a sweep's top set: ``top set by recall@5 (not significantly worse than
    the best: <test>; n queries): job 3 <name> 0.7871 (best), job 7 <name> 0.7863 (p_holm=0.97)``
    and, for a set larger than one, ``tie-breakers among the 2 jobs of the top set: fewest context
    tokens (context_tokens@5): job 7 <name> (612.0); fewest chunks ...; best context_precision@5: ...``."""
    if top is None:
        return []
    if top.result is None:
        return [f"top set by {objective}: not computed ({top.error})"]
    r = top.result
    parts = []
    for j in r.members:
        note = "best" if j == r.best else f"p_holm={r.p_holm[j]:.3g}"
        parts.append(f"job {j} {top.names.get(j, '')} {r.means[j]:.4f} ({note})")
    lines = [f"top set by {objective} (not significantly worse than the best: {r.settings.test_text()}; {r.n_queries} queries): {', '.join(parts)}"]
    if top.breakers:
        rules = []
        for b in top.breakers:
            choice = "no value" if b.choice is None else f"job {b.choice} {top.names.get(b.choice, '')} ({b.values[b.choice]:.4f})"
            rules.append(f"{b.rule} ({b.metric}): {choice}")
        lines.append(f"tie-breakers among the {len(r.members)} jobs of the top set: {'; '.join(rules)}")
    return lines


def best_retriever_per_chunker(rows, key: str, lower: bool = False) -> dict[str, str]:
    """The best retriever for each chunking (and embedding) of a sweep that compares retrievers.

    Args:
        rows: the sweep's FINISHED/skipped jobs (a DataFrame with ``run_name``, ``retriever``,
            optionally ``embedding``, and the objective column ``key``).
        key: the objective's MLflow key (``recall_at_5``).
        lower: True when lower is better.

    Returns:
        ``{"<chunking>[ / <embedding>]": "<retriever> (<key> <value>)"}`` for every chunking
        tried with two or more retrievers, the chunking being the run name without its
        retriever suffix (``recursive-254-0``); empty when the sweep has one retriever.
    """
    if "retriever" not in getattr(rows, "columns", ()) or rows["retriever"].nunique() < 2:
        return {}
    out: dict[str, str] = {}
    embeddings = "embedding" in rows.columns and rows["embedding"].nunique() > 1
    groups: dict[str, list[tuple[float, str]]] = {}
    for _, r in rows.iterrows():
        name, retriever = str(r["run_name"]), str(r["retriever"])
        chunking = name.rsplit("-" + retriever, 1)[0]  # the run name without its retriever (and embedding) suffix
        label = f"{chunking} / {r['embedding']}" if embeddings else chunking
        groups.setdefault(label, []).append((float(r[key]), retriever))
    for label, scored in groups.items():
        if len({r for _, r in scored}) < 2:
            continue
        value, retriever = sorted(scored, key=lambda t: (t[0] if lower else -t[0], t[1]))[0]
        out[label] = f"{retriever} ({key} {value:.4f})"
    return out


def summary_text(frame, best: int | None, objective: str, width: int = 8, top: SweepTop | None = None) -> str:
    """The sweep's jobs as a text table, best first, a line naming the best job, then the top
    set and its tie-breakers (:func:`top_set_lines`) when ``top`` is given.

    Args:
        frame: the summary table of :func:`finish_sweep` (``job``, ``run_name``, ``status``,
            ``run_id``, the objective's MLflow key, ``<family>_at_<k>`` columns, optionally
            ``time.total_s`` and ``error``).
        best: row index of the best job in ``frame``, or None.
        objective: ``metrics.objective`` (``recall@5``; lower is better for ``context_tokens@k``).
        width: characters of each run id shown.

    Columns: job, run, status, the objective, then recall, precision, context precision
    and IoU at the objective's cut-off (k = 5 when it has none) where logged, seconds, run
    id; jobs without a value (failed, invalid, busy) last, in job order, with their error.
    """
    import pandas as pd

    from harness.evaluation.metrics import mlflow_key

    key = mlflow_key(objective)
    k = objective.rsplit("@", 1)[1] if "@" in objective and objective.rsplit("@", 1)[1].isdigit() else "5"
    names = list(dict.fromkeys([objective] + [f"{f}@{k}" for f in metric_families("listed")]))
    cols = [(n, mlflow_key(n)) for n in names if mlflow_key(n) in frame.columns]
    valued = frame[frame["status"].isin(["FINISHED", "SKIPPED"]) & frame[key].notna()]
    valued = valued.sort_values(key, ascending=lower_is_better(objective), kind="stable")
    rest = frame.drop(valued.index)
    table = pd.DataFrame(
        {
            "job": [int(j) for j in pd.concat([valued["job"], rest["job"]])],
            "run": list(pd.concat([valued["run_name"], rest["run_name"]])),
            "status": list(pd.concat([valued["status"], rest["status"]])),
        }
    )
    order = list(valued.index) + list(rest.index)
    if "stage" in frame.columns:  # a screening sweep: which jobs ran the proxy
        table["stage"] = [str(frame.at[i, "stage"]) for i in order]
    for name, col in cols:
        table[name] = ["" if pd.isna(frame.at[i, col]) else f"{float(frame.at[i, col]):.4f}" for i in order]
    if "time.total_s" in frame.columns:
        table["time_s"] = ["" if pd.isna(frame.at[i, "time.total_s"]) else f"{float(frame.at[i, 'time.total_s']):.1f}" for i in order]
    table["run_id"] = [str(frame.at[i, "run_id"] or "")[:width] for i in order]
    if best is not None:
        table.insert(0, "", ["*" if i == best else "" for i in order])
    lines = [table.to_string(index=False)]
    if "error" in frame.columns:
        for i in rest.index:
            if isinstance(frame.at[i, "error"], str) and frame.at[i, "error"]:
                lines.append(f"job {int(frame.at[i, 'job'])} {frame.at[i, 'status']}: {frame.at[i, 'error']}")
    if best is not None:
        row = frame.loc[best]
        among = " among the confirmed jobs" if "stage" in frame.columns else ""
        lines.append(f"best by {objective}{among}: job {int(row['job'])} {row['run_name']} ({objective} {float(row[key]):.4f}, run {row['run_id']})")
    else:
        lines.append(f"best by {objective}: none (no job has a value)")
    lines += top_set_lines(top, objective)
    return "\n".join(lines)


def _job(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _metric_order(name: str) -> tuple[int, int]:
    family, k = name.rsplit("_at_", 1)
    return _FAMILY_ORDER.index(family), int(k)


def _values(tracker, run) -> dict[str, float]:
    """Every value ``run`` recorded (:func:`harness.tracking.runs.metrics_of`); its MLflow
    metrics alone when its metrics table cannot be read."""
    from harness.tracking.runs import TrackingStoreError, metrics_of

    try:
        return metrics_of(tracker.client, run)
    except TrackingStoreError:
        return dict(run.data.metrics)


def _row(run, job: int, status: str, key: str, metrics: dict[str, float] | None = None) -> dict:
    metrics = run.data.metrics if metrics is None else metrics
    row = {"job": job, "run_name": run.info.run_name or "", "status": status, "run_id": run.info.run_id, key: metrics.get(key, math.nan)}
    row.update({k: v for k, v in metrics.items() if _METRIC_COLUMNS.match(k)})
    for extra in ("chunks.n_chunks", "time.total_s"):
        if extra in metrics:
            row[extra] = metrics[extra]
    for tag in ("retriever", "embedding"):
        if tag in run.data.tags:
            row[tag] = run.data.tags[tag]
    if "error" in run.data.tags:
        row["error"] = run.data.tags["error"][:300]
    return row


def _config_loader():
    """Hydra's config loader of the running command (to expand ``glob(...)``), or None outside one."""
    try:
        from hydra.core.global_hydra import GlobalHydra

        instance = GlobalHydra.instance()
        return instance.config_loader() if instance.is_initialized() else None
    except Exception:  # noqa: BLE001 - without it a glob's job count is unknown, never wrong
        return None


class SweepRunCallback(Callback):
    """One MLflow parent run per Hydra multirun; see the module docstring for its life cycle.

    Single runs (no ``-m``) are left alone: they have no parent. Picklable (launchers ship
    callbacks to their workers): only the main process holds the tracker and the parent.

    Args:
        objective_png: draws the parent's ``sweep_objective.png`` (see :func:`finish_sweep`);
            ``conf/config.yaml`` gives :func:`harness.reporting.charts.objective_png`.
        report_page: renders the parent's ``report.html`` (see :func:`finish_sweep`);
            ``conf/config.yaml`` gives :func:`harness.experiment.report.sweep_report_page`.
    """

    def __init__(self, objective_png: Callable[..., bytes] | None = None, report_page: Callable[..., str] | None = None) -> None:
        self._objective_png = objective_png
        self._report_page = report_page
        self._tracker = None
        self._parent: str | None = None
        self._objective = "recall@5"
        self._interrupted = False
        self._previous: dict[int, Any] = {}
        self._report = True
        self._top_settings = None
        self._sweep_dir: Path | None = None

    def __getstate__(self) -> dict:
        return {
            "_tracker": None,
            "_parent": None,
            "_objective": self._objective,
            "_interrupted": False,
            "_previous": {},
            "_report": self._report,
            "_top_settings": self._top_settings,
            "_sweep_dir": self._sweep_dir,
            "_objective_png": self._objective_png,
            "_report_page": self._report_page,
        }

    # ------------------------------------------------------------------ Hydra hooks

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Plan the sweep (:func:`plan_sweep`; :class:`SweepRefused` before anything else when
        the plan refuses it), close dead sweeps' parents, open this sweep's parent with the
        plan's name, ``sweep.jobs``, ``sweep.grid`` and ``sweep_plan.json``, and publish its id
        and job count in the sweep folder."""
        from harness.tracking.runs import experiment_name
        from harness.tracking.tracker import (
            HOST_TAG,
            MAX_TAG_VALUE,
            PID_START_TAG,
            PID_TAG,
            SWEEP_TAG,
            Tracker,
            artifact_root_for,
            process_start,
            resolve_tracking_uri,
        )

        try:
            plan = plan_of(config.hydra, _config_loader())
            top_settings, baseline = sweep_settings(config, plan)
            screen = screen_settings(config, plan)
        except SweepPlanError as exc:
            raise SweepRefused(str(exc)) from None
        root = config.paths.root  # the project folder (``${project_root:}``)
        uri = resolve_tracking_uri(config.tracking.uri, root)
        experiment = experiment_name(config)
        tracker = Tracker(uri, experiment, artifact_root_for(uri, root))
        for parent, children in tracker.close_dead_sweeps():
            print(f"closed the parent run of a dead sweep as KILLED: {parent}")
            if children:
                print(f"closed {len(children)} RUNNING run(s) of that sweep as KILLED: {', '.join(children)}")
        hydra_cfg = config.hydra
        sweep_dir = Path(str(hydra_cfg.sweep.dir)).resolve()
        self._objective = str(config.metrics.objective)
        self._report = config.tracking.get("report", True) is True
        tags = {
            SWEEP_TAG: "parent",
            "sweep.dir": str(sweep_dir),
            "sweep.overrides": " ".join(str(o) for o in hydra_cfg.overrides.task),
            "sweep.sweeper": str(hydra_cfg.sweeper.get("_target_", "")),
            "sweep.launcher": str(hydra_cfg.launcher.get("_target_", "")),
            "sweep.objective": self._objective,
            HOST_TAG: socket.gethostname(),
            PID_TAG: os.getpid(),
            PID_START_TAG: process_start(os.getpid()) or "",
        }
        if plan.n_jobs is not None:
            tags["sweep.jobs"] = plan.n_jobs
        self._top_settings = top_settings
        tags["sweep.top_set_settings"] = json.dumps(top_settings.to_dict(), sort_keys=True)
        if baseline is not None:
            tags["sweep.baseline"] = str(baseline)
        if screen.screen is not None:
            tags.update({"sweep.screen": screen.screen, "sweep.screen.proxy": " ".join(screen.proxy_overrides), "sweep.screen.keep": screen.keep})
        self._sweep_dir = sweep_dir
        default = default_job(plan, config) if screen.screen is None else None  # a screening sweep's job numbers are not the grid's
        if default is not None:
            tags["sweep.default_job"] = default
        grid = plan.grid_text()
        if grid:
            tags["sweep.grid"] = grid if len(grid) <= MAX_TAG_VALUE else grid[: MAX_TAG_VALUE - 3] + "..."
        name = str(config.tracking.get("sweep_name") or sweep_name(hydra_cfg, plan))
        if screen.screen is not None and not config.tracking.get("sweep_name"):  # a screening sweep of a grid is not its exact sweep
            suffix = f" | screened by {screen.screen}, keep {screen.keep}"
            name = (name if len(name) + len(suffix) <= MAX_NAME else name[: MAX_NAME - len(suffix) - 4] + " ...") + suffix
        run_id = tracker.start(name, tags)
        self._tracker, self._parent = tracker, run_id
        atexit.register(self._at_exit)
        self._install_signal_handlers()
        tracker.log_text(json.dumps(plan.to_dict(), indent=1), PLAN_FILE)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        record = {"run_id": run_id, "tracking_uri": uri, "experiment_id": tracker.experiment_id, "pid": os.getpid(), "jobs": plan.n_jobs}
        tmp = sweep_dir / f".{PARENT_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
        os.replace(tmp, sweep_dir / PARENT_FILE)
        print(f"sweep parent run {run_id}: {name} (experiment {experiment!r})")
        sys.stdout.flush()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Every job returned: summarise, print the job table with the best job, and close the
        parent FINISHED; exit 2 when a job was refused for an invalid configuration, else
        :data:`harness.tracking.tracker.EXIT_BUSY` when a job was skipped because its configuration
        was RUNNING in another live process (its result is not in this sweep yet)."""
        from harness.tracking.tracker import EXIT_BUSY

        counts = self._close("FINISHED")
        if counts.get("INVALID"):
            print(f"{counts['INVALID']} job(s) refused for an invalid configuration (see the 'invalid:' lines above); no run was created for them")
            sys.stdout.flush()
            raise SystemExit(2)
        if counts.get("BUSY"):
            print(
                f"{counts['BUSY']} job(s) skipped: their configuration is RUNNING in another process (see the skip lines above); rerun this sweep once those runs have ended"
            )
            sys.stdout.flush()
            raise SystemExit(EXIT_BUSY)

    # ------------------------------------------------------------------ abnormal ends

    def _at_exit(self) -> None:
        if self._parent is not None:
            self._close("KILLED" if self._interrupted else "FAILED")

    def _close(self, status: str) -> dict[str, int]:
        parent, tracker = self._parent, self._tracker
        self._parent = None
        self._restore_signal_handlers()
        if parent is None or tracker is None:
            return {}
        from harness.tracking.tracker import signals_deferred

        tables: list[str] = []
        objective = self._objective
        screening = read_screening(self._sweep_dir)
        with signals_deferred():  # a Ctrl-C inside the summary would leave the parent RUNNING
            counts = finish_sweep(
                tracker,
                parent,
                status,
                objective,
                report=self._report,
                on_summary=lambda frame, best, top: tables.append("\n".join([summary_text(frame, best, objective, top=top), *screening_lines(screening)])),
                top_settings=self._top_settings,
                objective_png=self._objective_png,
                report_page=self._report_page,
                screening=screening,
            )
        done = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n)
        if tables:
            print("\n" + tables[0])
        print(f"sweep parent run {parent}: {status} ({done or 'no jobs'})")
        if self._report and tables:
            print(f"sweep report: artifact report.html of the parent run (or: harness report --sweep {parent})")
        sys.stdout.flush()
        return counts

    def _install_signal_handlers(self) -> None:
        """Ctrl-C and SIGTERM mark the sweep as interrupted (parent KILLED), then end it as usual:
        KeyboardInterrupt for SIGINT, ``SystemExit(143)`` for SIGTERM. Handlers somebody else
        installed are left in place."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return

        for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
            if signal.getsignal(signum) is default:
                self._previous[signum] = default
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self._interrupted = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def _restore_signal_handlers(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:  # not replaced by someone else since
                signal.signal(signum, handler)
        self._previous = {}
