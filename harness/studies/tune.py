"""Search chunking configurations with Optuna instead of a grid.

::

    harness tune [--space experiments/search_space.yaml] [--trials N]
                           [--storage sqlite:///.cache/optuna.db] [--study NAME] [--seed S]
                           [hydra overrides ...]

Each trial composes the project's Hydra config (``conf/``) with, in this order, the space
file's ``overrides``, the command-line overrides and the trial's suggested parameters,
then runs it with :func:`harness.experiment.run.execute` with ``resume=false`` (pass ``resume=true``
to let a configuration suggested twice reuse its finished run; the trial then records
``reused_run``): one trial = one MLflow run, tagged
``optuna.study`` and ``optuna.trial`` (the trial number); the Optuna trial records the run
id as the user attribute ``mlflow_run_id``. The objective values are the run's metrics
named in the space file (``recall@5`` maximised by default; add ``context_tokens@5``,
minimised, for a two-objective Pareto front).

Resuming: the study lives in ``--storage`` (an SQLAlchemy URL; default
``sqlite:///<project>/.cache/optuna.db``; ``memory`` keeps it in memory only). ``--trials N``
is the number of COMPLETE trials the study should hold in total, not the number to add:
rerunning the same command after an interruption runs only the missing ones, and rerunning
it when the study is complete runs nothing. A trial that raised (its MLflow run is FAILED)
or whose process was killed does not count, so it is made up on the next invocation; one
invocation makes at most ``N - complete`` attempts, so a space in which every configuration
fails cannot loop. A trial left RUNNING by a killed process is marked FAIL once its
heartbeat is older than the grace period (3 minutes).

Why not Hydra's Optuna sweeper: hydra-optuna-sweeper 1.3.0 pins optuna < 3, whose SQL
storage fails beside the SQLAlchemy 2 that MLflow needs; only in-memory studies would work,
which cannot resume. This module drives a current Optuna (5.x) over ``hydra.compose``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.experiment.build import PROJECT_ROOT
from harness.experiment.config import compose
from harness.params import require_int

#: Default search-space file.
DEFAULT_SPACE = PROJECT_ROOT / "experiments" / "search_space.yaml"
#: Default study storage.
DEFAULT_STORAGE = f"sqlite:///{PROJECT_ROOT / '.cache' / 'optuna.db'}"
#: Parameter types a space file may use.
PARAM_TYPES = ("categorical", "int", "float", "fraction")
#: Seconds between trial heartbeats and age after which a RUNNING trial counts as dead.
HEARTBEAT_S, GRACE_S = 30, 180


@dataclass(frozen=True)
class Param:
    """One searched Hydra key.

    Attributes:
        name: the Hydra key overridden (``chunker``, ``chunker.chunk_size``, ...); also the
            Optuna parameter name.
        type: one of :data:`PARAM_TYPES`.
        choices: values of a categorical parameter.
        low, high: inclusive bounds of int/float/fraction parameters (fraction: in [0, 1)).
        step: grid step (int default 1; float/fraction: None = continuous).
        log: sample on a log scale (int/float only; not with a step).
        of: for ``fraction``, the earlier int parameter it is a share of.
        when: ``{earlier parameter: allowed values}``: suggest this one only if all match.
    """

    name: str
    type: str
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    of: str | None = None
    when: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SearchSpace:
    """A parsed search-space file (see ``experiments/search_space.yaml`` for the format)."""

    study: str
    objectives: tuple[tuple[str, str], ...]  # (metric name, "maximize" | "minimize")
    overrides: tuple[str, ...]
    params: tuple[Param, ...]

    @property
    def metrics(self) -> list[str]:
        return [m for m, _ in self.objectives]

    @property
    def directions(self) -> list[str]:
        return [d for _, d in self.objectives]


def load_space(path: str | Path) -> SearchSpace:
    """Read and validate a search-space YAML file.

    Raises:
        ValueError: the file is missing or not a mapping; ``objectives`` empty or with a
            direction other than maximize/minimize; a parameter with an unknown ``type``,
            a categorical without ``choices``, bounds missing or ``low > high``, a
            ``fraction`` outside [0, 1) or whose ``of`` is not an earlier int parameter,
            ``log`` with a step or a non-positive bound, or a ``when`` naming a parameter
            that is not defined earlier. Messages name the file and the key.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--space: search-space file {path} not found")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a search space must be a YAML mapping")
    where = lambda key: f"{path}: {key}"  # noqa: E731
    objectives = []
    for i, obj in enumerate(data.get("objectives") or [{"metric": "recall@5", "direction": "maximize"}]):
        if not isinstance(obj, dict) or "metric" not in obj:
            raise ValueError(f"{where(f'objectives[{i}]')} must be a mapping with a 'metric'")
        direction = str(obj.get("direction", "maximize")).lower()
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"{where(f'objectives[{i}].direction')} must be maximize or minimize, got {direction!r}")
        objectives.append((str(obj["metric"]), direction))
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list):
        raise ValueError(f"{where('overrides')} must be a list of Hydra overrides")
    params: list[Param] = []
    raw_params = data.get("params") or {}
    if not isinstance(raw_params, dict) or not raw_params:
        raise ValueError(f"{where('params')} must be a non-empty mapping of Hydra keys to parameter specs")
    for name, spec in raw_params.items():
        key = where(f"params.{name}")
        if not isinstance(spec, dict):
            raise ValueError(f"{key} must be a mapping with a 'type'")
        ptype = spec.get("type")
        if ptype not in PARAM_TYPES:
            raise ValueError(f"{key}.type must be one of {list(PARAM_TYPES)}, got {ptype!r}")
        earlier = {p.name: p for p in params}
        when = spec.get("when") or {}
        if not isinstance(when, dict):
            raise ValueError(f"{key}.when must map earlier parameters to lists of values")
        for dep, values in when.items():
            if dep not in earlier:
                raise ValueError(f"{key}.when names {dep!r}, which is not a parameter defined before {name!r}")
            if not isinstance(values, list):
                when[dep] = [values]
        if ptype == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"{key}.choices must be a non-empty list")
            params.append(Param(name, ptype, choices=tuple(choices), when=dict(when)))
            continue
        if spec.get("low") is None or spec.get("high") is None:
            raise ValueError(f"{key} needs 'low' and 'high'")
        low, high = spec["low"], spec["high"]
        if low > high:
            raise ValueError(f"{key}: low={low} > high={high}")
        step = spec.get("step", 1 if ptype == "int" else None)
        if step is not None and step <= 0:
            raise ValueError(f"{key}.step must be > 0, got {step}")
        log = bool(spec.get("log", False))
        if log and (step not in (None, 1) or low <= 0 or ptype == "fraction"):
            raise ValueError(f"{key}.log needs low > 0, no step and type int or float")
        of = None
        if ptype == "fraction":
            if not 0.0 <= low <= high < 1.0:
                raise ValueError(f"{key}: a fraction needs 0 <= low <= high < 1, got [{low}, {high}]")
            of = spec.get("of")
            if of not in earlier or earlier[of].type != "int":
                raise ValueError(f"{key}.of must name an int parameter defined before {name!r}, got {of!r}")
        elif ptype == "int" and not all(isinstance(v, int) for v in (low, high, step)):
            raise ValueError(f"{key}: low, high and step of an int parameter must be integers")
        params.append(Param(name, ptype, low=low, high=high, step=step, log=log, of=of, when=dict(when)))
    return SearchSpace(
        study=str(data.get("study") or path.stem),
        objectives=tuple(objectives),
        overrides=tuple(str(o) for o in overrides),
        params=tuple(params),
    )


def _format(value: Any) -> str:
    """A Hydra override value: floats without binary noise (0.35, not 0.35000000000000003)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def suggest(trial, space: SearchSpace) -> list[str]:
    """Ask ``trial`` for every active parameter of ``space``; returns Hydra overrides.

    A parameter whose ``when`` does not match the values suggested so far is skipped (not
    suggested, not overridden: the config default applies). A ``fraction`` becomes the
    integer ``round(fraction * value of its 'of' parameter)``; when its ``of`` parameter
    is inactive it is skipped too.
    """
    values: dict[str, Any] = {}
    overrides: list[str] = []
    for p in space.params:
        if any(dep not in values or values[dep] not in allowed for dep, allowed in p.when.items()):
            continue
        if p.type == "categorical":
            value = trial.suggest_categorical(p.name, list(p.choices))
        elif p.type == "int":
            value = trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step), log=p.log)
        else:
            if p.type == "fraction" and p.of not in values:
                continue
            value = trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
        values[p.name] = value
        if p.type == "fraction":
            overrides.append(f"{p.name}={int(round(value * values[p.of]))}")
        else:
            overrides.append(f"{p.name}={_format(value)}")
    return overrides


def _check_objectives(space: SearchSpace, overrides: Sequence[str]) -> None:
    """Fail before any trial when an objective metric cannot be produced by the base config.

    Raises:
        ValueError: a metric name that is not a harness metric, or whose k / token budget is
            not in ``metrics.ks`` / ``metrics.budgets``; a command-line override of a
            searched key.
    """
    from harness.experiment.settings import metric_settings

    searched = {p.name for p in space.params}
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in searched:
            raise ValueError(f"override {o!r} sets {key!r}, which the search space searches; remove one of them")
    metrics = metric_settings(compose([*space.overrides, *overrides]))
    for metric in space.metrics:
        metrics.check_metric(metric, "objectives")


def _storage(url: str | None):
    """An Optuna storage: None (in memory) for ``memory``/None, else an RDB with heartbeats."""
    import optuna

    if url in (None, "", "memory", ":memory:"):
        return None
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)


def _tag_run(cfg, run_id: str | None, started_ms: int, tags: dict[str, str]) -> str | None:
    """Set ``tags`` on the trial's MLflow run; when the run raised (no run id returned),
    find it as the newest run with this config hash started since ``started_ms``
    (Unix ms). Returns the run id, or None when no such run exists."""
    from harness.experiment.build import config_hash
    from harness.tracking.runs import UnknownExperiment, annotate_run, experiment_name, search_runs
    from harness.tracking.tracker import resolve_tracking_uri

    uri = resolve_tracking_uri(cfg.tracking.uri, PROJECT_ROOT)
    if run_id is None:
        try:
            runs = search_runs(
                uri,
                experiment_name(cfg),
                filter_string=f"tags.config_hash = '{config_hash(cfg)}' and attributes.start_time >= {started_ms}",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
        except UnknownExperiment:
            return None
        if not runs:
            return None
        run_id = runs[0].run_id
    annotate_run(uri, run_id, tags=tags)
    return run_id


def run_study(
    space: SearchSpace,
    trials: int,
    storage: str | None = DEFAULT_STORAGE,
    study_name: str | None = None,
    overrides: Sequence[str] = (),
    seed: int | None = None,
):
    """Create or resume a study and run it until it holds ``trials`` COMPLETE trials.

    Args:
        space: the search space (:func:`load_space`).
        trials: total COMPLETE trials wanted, >= 1 (see the module docstring).
        storage: SQLAlchemy URL of the study storage, or None/``memory`` for in-memory.
        study_name: defaults to ``space.study``.
        overrides: Hydra overrides for every trial (after the space file's).
        seed: sampler seed (TPE); None = random.

    Returns:
        The ``optuna.Study``.

    Raises:
        ValueError: ``trials`` < 1; a bad objective or a clash of overrides
            (:func:`_check_objectives`); an existing study of that name with other
            objectives.
    """
    import optuna

    from harness.evaluation.metrics import mlflow_key
    from harness.experiment.run import execute
    from harness.tracking.worker import RunBusy

    require_int("--trials", trials, low=1)
    _check_objectives(space, overrides)
    name = study_name or space.study
    has_resume = "resume" in compose([])
    study = optuna.create_study(
        storage=_storage(storage),
        study_name=name,
        directions=space.directions,
        sampler=optuna.samplers.TPESampler(seed=seed),
        load_if_exists=True,
    )
    stored = study.user_attrs.get("objectives")
    if stored is None:
        study.set_user_attr("objectives", space.metrics)
    elif list(stored) != space.metrics:
        raise ValueError(f"study {name!r} optimises {list(stored)}, not {space.metrics}: use another --study")
    if storage not in (None, "", "memory", ":memory:"):
        optuna.storages.fail_stale_trials(study)
    done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    todo = max(0, trials - done)
    print(f"study {name!r}: {done} complete trial(s), target {trials}: running {todo}")

    def objective(trial):
        # resume=false first, so a command-line resume=true can win: then a configuration
        # suggested twice reuses its FINISHED run instead of running again
        trial_overrides = [*(["resume=false"] if has_resume else []), *space.overrides, *overrides, *suggest(trial, space)]
        trial.set_user_attr("overrides", trial_overrides)
        cfg = compose(trial_overrides)
        print(f"\n[trial {trial.number}] {' '.join(trial_overrides)}")
        sys.stdout.flush()
        tags = {"optuna.study": name, "optuna.trial": str(trial.number)}
        started_ms = int(time.time() * 1000) - 1000
        try:
            result = execute(cfg)
        except RunBusy:  # the configuration runs in another process: nothing of this trial is in MLflow
            raise
        except BaseException:
            run_id = _tag_run(cfg, None, started_ms, tags)
            if run_id:
                trial.set_user_attr("mlflow_run_id", run_id)
            raise
        trial.set_user_attr("mlflow_run_id", result["run_id"])
        if result.get("skipped"):  # resume=true and this configuration already has a finished run
            trial.set_user_attr("reused_run", True)
        else:
            _tag_run(cfg, result["run_id"], started_ms, tags)
        metrics = result["metrics"]  # harness names (recall@5), or MLflow keys (recall_at_5) for a reused run
        values = [float(metrics[m] if m in metrics else metrics[mlflow_key(m)]) for m in space.metrics]
        if any(math.isnan(v) for v in values):
            raise ValueError(f"objective metric is NaN: {dict(zip(space.metrics, values))}")
        return values[0] if len(values) == 1 else values

    if todo:
        study.optimize(objective, n_trials=todo, catch=(Exception,))
    return study


def summary(study, space: SearchSpace) -> str:
    """The best trial (one objective) or the Pareto front (several), as text."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    failed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
    lines = [f"study {study.study_name!r}: {len(complete)} complete, {len(failed)} failed trial(s)"]
    if not complete:
        return "\n".join(lines + ["no complete trial yet"])
    best = [study.best_trial] if len(space.objectives) == 1 else sorted(study.best_trials, key=lambda t: t.number)
    lines.append("best trial:" if len(best) == 1 else f"Pareto front ({len(best)} trials):")
    for t in best:
        vals = ", ".join(f"{m}={v:.4f}" for m, v in zip(space.metrics, t.values))
        lines.append(f"  trial {t.number}: {vals}  run {t.user_attrs.get('mlflow_run_id', '?')}")
        lines.append(f"    best params: {t.params}")
        lines.append(f"    overrides:   {' '.join(t.user_attrs.get('overrides', []))}")
    return "\n".join(lines)
