"""Frozen settings built once from the config and passed down as plain values.

The ``metrics`` and ``stats`` config groups are read here and nowhere else: the
orchestrator (:mod:`harness.experiment.run`), the release gate and the Optuna search call
:meth:`MetricSettings.from_config` / :meth:`StatsSettings.from_config` and hand the objects
to the layers below. Defaults live only in the YAML files (``conf/metrics/default.yaml``,
the ``stats`` block of ``conf/config.yaml``); a config without one of the keys is an error
that names it, and an unknown key is an error that names the closest known one.

Adding a metrics setting: one key in ``conf/metrics/default.yaml``, one field (with its
check) in :class:`MetricSettings`, and its use where it acts.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any, Mapping

from harness.experiment.build import PROJECT_ROOT
from harness.params import Param, check_all, is_int

#: The file that holds every ``metrics`` setting and its default.
METRICS_DEFAULTS = PROJECT_ROOT / "conf" / "metrics" / "default.yaml"


def _group(cfg: Any, name: str, keys: tuple[str, ...], source: str) -> dict[str, Any]:
    """The config group ``name`` of ``cfg`` as a plain dict holding exactly ``keys``.

    Raises:
        ValueError: the group is absent, a key is missing (naming ``source``, where its
            default is set) or unknown (with the closest known key, when there is one).
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    node = cfg.get(name) if isinstance(cfg, (Mapping, DictConfig)) else None
    if node is None:
        raise ValueError(f"{name}: config group missing; expected the keys {list(keys)} ({source} sets them)")
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node
    data = dict(data) if isinstance(data, Mapping) else data
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a mapping of settings, got {data!r}")
    _reject_unknown(name, data, keys)
    for key in keys:
        if key not in data:
            raise ValueError(f"{name}.{key}: missing; {source} sets its default")
    return data


def _reject_unknown(name: str, given, keys: tuple[str, ...]) -> None:
    """Raise ``ValueError("<name>.<key>: unknown setting; did you mean <name>.<close>? (known: ...)")``
    for the first key of ``given`` not in ``keys``."""
    for key in given:
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1)
            hint = f"; did you mean {name}.{close[0]}?" if close else ""
            raise ValueError(f"{name}.{key}: unknown setting{hint} (known: {', '.join(keys)})")


def _once(setting: str, values: tuple, what: str) -> None:
    """Refuse a list setting that holds a value twice: it would be logged as typed but run
    once (and change the config hash of what is the same run).

    Raises:
        ValueError: ``"metrics.ks lists 5 twice: [5, 1, 5]; list each cut-off once (the order is free)"``.
    """
    seen: set = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{setting} lists {v!r} twice: {list(values)!r}; list each {what} once (the order is free)")
        seen.add(v)


@dataclass(frozen=True)
class MetricSettings:
    """What is scored and how: the ``metrics`` config group (``conf/metrics/default.yaml``).

    Attributes:
        ks: rank cut-offs for every ``<family>@k`` metric, each an integer >= 1, each listed
            once, in config order (retrieval fetches at least ``max(ks)`` chunks per query).
        relevance: chunk relevance rule of the chunk-qrels metrics, one of
            :data:`harness.evaluation.metrics.ranking.RELEVANCE_RULES`.
        relevance_fraction: ``f`` of the ``overlap_fraction`` rule, in [0, 1]: a chunk is
            relevant when its overlap with an evidence span is at least
            ``f * min(|chunk|, |span|)`` characters.
        budgets: context-token budgets ``B`` of ``recall@<B>tok`` (tokens of
            ``context_tokenizer``), each an integer >= 1 listed once; empty disables them.
        budget_depth: ranked chunks fetched for the budget metrics, an integer >= 1, or
            None for ``min(1000, 2 * ceil(max(budgets) / median chunk tokens))``.
        level: ``"chunk"``, or ``"document"`` to add ``doc_recall@k`` and ``doc_ndcg@k``.
        context_tokenizer: tokenizer of ``context_tokens@k`` and of the budgets:
            ``"model"`` (the embedding model's WordPiece) or a tiktoken encoding with an
            offline copy (:data:`harness.text.units.TIKTOKEN_OFFLINE`, e.g. ``cl100k_base``).
        objective: the metric a run returns to Hydra sweepers (e.g. ``recall@5``); its k
            must be in ``ks``, its budget in ``budgets``, a ``doc_*`` metric needs
            ``level="document"`` and a ``chroma_*`` one ``convention="chroma"``. None when
            nothing is optimised (library calls).
        convention: ``"harness"`` (our metrics only) or ``"chroma"`` (adds the
            ``chroma_recall@k``, ``chroma_precision@k``, ``chroma_iou@k`` and
            ``chroma_precision_omega`` of :mod:`harness.evaluation.metrics.chroma` beside
            ours, which never change).

    Raises:
        ValueError: on construction, a value outside the ranges above; the message names
            the ``metrics.<key>`` setting and the value received.
    """

    ks: tuple[int, ...]
    relevance: str
    relevance_fraction: float
    budgets: tuple[int, ...]
    budget_depth: int | None
    level: str
    context_tokenizer: str
    objective: str | None
    convention: str

    def __post_init__(self) -> None:
        from harness.evaluation.metrics.chroma import check_convention
        from harness.evaluation.metrics.ranking import check_relevance
        from harness.text.units import TIKTOKEN_OFFLINE

        ks, budgets, depth, fraction = self.ks, self.budgets, self.budget_depth, self.relevance_fraction
        if not ks or any(not is_int(k) or k < 1 for k in ks):
            raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
        _once("metrics.ks", ks, "cut-off")
        Param("relevance_fraction", "number", low=0, high=1, noun="").check(fraction, "metrics")
        check_relevance(self.relevance, fraction)
        if any(not is_int(b) or b < 1 for b in budgets):
            raise ValueError(f"metrics.budgets must be a list of integers >= 1, got {list(budgets)!r}")
        _once("metrics.budgets", budgets, "budget")
        Param("budget_depth", "int", low=1, allow_none=True).check(depth, "metrics")
        if self.level not in ("chunk", "document"):
            raise ValueError(f"metrics.level must be 'chunk' or 'document', got {self.level!r}")
        check_convention(self.convention)
        if self.objective is not None:
            unmet = self._unmet(self.objective, "metrics.objective: ")
            if unmet:
                raise ValueError(f"metrics.objective={self.objective!r} {unmet}")
        allowed = ["model", *TIKTOKEN_OFFLINE]
        if self.context_tokenizer not in allowed:
            raise ValueError(f"metrics.context_tokenizer must be one of {allowed}, got {self.context_tokenizer!r}")

    @classmethod
    def from_config(cls, cfg) -> MetricSettings:
        """The settings of ``cfg.metrics`` (a composed config, or a mapping holding ``metrics``).

        Raises:
            ValueError: the group or one of its keys is missing, a key is unknown (with the
                closest known key), or a value is out of range (see the class).
        """
        data = _group(cfg, "metrics", _FIELDS, str(METRICS_DEFAULTS.relative_to(PROJECT_ROOT)))
        data["objective"] = str(data["objective"])  # null is no metric name: "metrics.objective: unknown metric"
        return cls._from_mapping(data)

    @classmethod
    def defaults(cls, **changes: Any) -> MetricSettings:
        """The settings of ``conf/metrics/default.yaml`` with ``changes`` applied, for library
        calls (tests, notebooks): e.g. ``MetricSettings.defaults(ks=[1, 5], budgets=[])``.

        ``objective`` is None unless given: a library call optimises nothing, so changing
        ``ks`` never trips over the configured objective.

        Raises:
            ValueError: an unknown setting name in ``changes`` or a value out of range.
        """
        from omegaconf import OmegaConf

        data = _group({"metrics": OmegaConf.load(METRICS_DEFAULTS)}, "metrics", _FIELDS, str(METRICS_DEFAULTS))
        data["objective"] = None
        _reject_unknown("metrics", changes, _FIELDS)
        return cls._from_mapping({**data, **changes})

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any]) -> MetricSettings:
        def seq(key: str) -> Any:
            value = data[key]
            return tuple(value) if isinstance(value, (list, tuple)) else value

        fraction, objective = data["relevance_fraction"], data["objective"]
        return cls(
            ks=seq("ks"),
            relevance=str(data["relevance"]),
            relevance_fraction=float(fraction) if is_int(fraction) else fraction,
            budgets=seq("budgets"),
            budget_depth=data["budget_depth"],
            level=str(data["level"]),
            context_tokenizer=str(data["context_tokenizer"]),
            objective=None if objective is None else str(objective),
            convention=str(data["convention"]),
        )

    def _unmet(self, name: str, prefix: str) -> str | None:
        """What ``name`` needs that these settings lack (``"needs k=7 in metrics.ks=[1, 5]"``), or None.

        Raises:
            ValueError: ``name`` is not a registered metric name (message starts with ``prefix``).
        """
        from harness.evaluation.metrics import parse_name

        try:
            parsed = parse_name(name)
        except ValueError as exc:
            raise ValueError(f"{prefix}{exc}") from exc
        if parsed.k is not None and parsed.k not in self.ks:
            return f"needs k={parsed.k} in metrics.ks={list(self.ks)}"
        if parsed.budget is not None and parsed.budget not in self.budgets:
            return f"needs {parsed.budget} in metrics.budgets={list(self.budgets)}"
        if parsed.family.level == "document" and self.level != "document":
            return "needs metrics.level=document"
        if parsed.family.convention != "harness" and parsed.family.convention != self.convention:
            return f"needs metrics.convention={parsed.family.convention}"
        return None

    def check_metric(self, name: str, field: str) -> None:
        """Raise when metric ``name`` (e.g. an objective of a search) cannot be produced
        with these settings; ``field`` starts the message (``"objectives"``).

        Raises:
            ValueError: ``"<field>: <why name is unknown>"`` or ``"<field>: 'recall@7' needs
                k=7 in metrics.ks=[1, 5]"`` (likewise for budgets, document metrics and
                ``chroma_*`` metrics, which need ``metrics.convention=chroma``).
        """
        unmet = self._unmet(name, f"{field}: ")
        if unmet:
            raise ValueError(f"{field}: {name!r} {unmet}")


_FIELDS = tuple(f.name for f in fields(MetricSettings))

#: The ``stats`` group's settings, as :class:`StatsSettings` checks them.
STATS_PARAMS = (
    Param("bootstrap", "int", low=0, note="0 = no confidence intervals", message="{name} must be {need}, got {value}"),
    Param("confidence", "number", low=0, high=1, low_open=True, high_open=True, noun="", message="{name} must be {need}, got {value}"),
    Param("seed", "int"),
)


@dataclass(frozen=True)
class StatsSettings:
    """Confidence intervals of the mean metrics: the ``stats`` block of ``conf/config.yaml``.

    Attributes:
        bootstrap: bootstrap resamples per mean metric, an integer >= 0 (0: no
            ``<metric>_ci_low`` / ``_ci_high``).
        confidence: coverage of the intervals, in (0, 1) (0.95: a 95 % interval).
        seed: seed of the resampling and of the ``chunks_sample.jsonl`` draw (any integer).

    Raises:
        ValueError: on construction, a value outside the ranges above, naming ``stats.<key>``.
    """

    bootstrap: int
    confidence: float
    seed: int

    def __post_init__(self) -> None:
        check_all(STATS_PARAMS, {"bootstrap": self.bootstrap, "confidence": self.confidence, "seed": self.seed}, "stats")

    @classmethod
    def from_config(cls, cfg) -> StatsSettings:
        """The settings of ``cfg.stats``.

        Raises:
            ValueError: the group or a key is missing, a key is unknown, or a value is out of range.
        """
        data = _group(cfg, "stats", tuple(f.name for f in fields(cls)), "conf/config.yaml")
        c = data["confidence"]
        return cls(bootstrap=data["bootstrap"], confidence=float(c) if is_int(c) else c, seed=data["seed"])


@dataclass(frozen=True)
class RunSettings:
    """Where and how one run is recorded: ``resume`` and the ``tracking`` group.

    Attributes:
        resume: skip a job whose config hash already has a FINISHED run (``resume``).
        tracking_uri: the MLflow tracking URI (``tracking.uri``, else
            ``$MLFLOW_TRACKING_URI``, else the project's ``mlruns/mlflow.db``).
        experiment: MLflow experiment name (``tracking.experiment``, else the dataset name).
        run_name: MLflow run name (``tracking.run_name``, else e.g. ``recursive-254-0-faiss``).
        report: log ``report.html`` and the artifacts it reads (``tracking.report``, default true).
        metrics_mode: ``tracking.metrics``: ``headline`` logs the headline metrics as MLflow
            metrics and every value in the ``metrics.json`` table, ``all`` logs every value
            as an MLflow metric too (:mod:`harness.tracking.headline`).
        purpose: ``tracking.purpose``: None for an ordinary run, else the ``harness.purpose``
            tag (``gate``, ``bench``) that keeps the run out of ``harness compare``'s listing.

    Raises:
        ValueError: ``resume`` or ``tracking.report`` is not a boolean; ``metrics_mode`` is not
            ``headline`` or ``all``; ``purpose`` is neither None nor a non-empty string.
    """

    resume: bool
    tracking_uri: str
    experiment: str
    run_name: str
    report: bool = True
    metrics_mode: str = "headline"
    purpose: str | None = None

    def __post_init__(self) -> None:
        from harness.tracking.headline import check_mode

        if not isinstance(self.resume, bool):
            raise ValueError(f"resume must be true or false, got {self.resume!r}")
        if not isinstance(self.report, bool):
            raise ValueError(f"tracking.report must be true or false, got {self.report!r}")
        check_mode(self.metrics_mode)
        if self.purpose is not None and (not isinstance(self.purpose, str) or not self.purpose.strip()):
            raise ValueError(f"tracking.purpose must be null or a non-empty word such as gate or bench, got {self.purpose!r}")

    @classmethod
    def from_config(cls, cfg) -> RunSettings:
        """The settings of ``cfg`` (a composed config).

        Raises:
            ValueError: ``resume`` missing or not a boolean; ``tracking.metrics`` or ``tracking.purpose`` invalid.
        """
        from harness.experiment import build
        from harness.tracking.runs import experiment_name
        from harness.tracking.tracker import resolve_tracking_uri

        if "resume" not in cfg:
            raise ValueError("resume: missing; conf/config.yaml sets its default")
        return cls(
            resume=cfg.resume,
            tracking_uri=resolve_tracking_uri(cfg.tracking.uri, build.PROJECT_ROOT),
            experiment=experiment_name(cfg),
            run_name=cfg.tracking.run_name or build.run_name(cfg),
            report=cfg.tracking.get("report", True),
            metrics_mode=cfg.tracking.get("metrics", "headline"),
            purpose=cfg.tracking.get("purpose"),
        )
