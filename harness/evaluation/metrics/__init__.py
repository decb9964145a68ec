"""Metric registry: every metric name, its parameter, formula, range and source; MLflow keys.

Name format (one grammar for every metric this project reports):

* ``<family>@<k>`` -- a rank cut-off ``k >= 1``: the first ``k`` retrieved units
  (``recall@5``, ``ndcg@10``, ``doc_recall@100``).
* ``<family>@<B>tok`` -- a context budget of ``B >= 1`` tokens of the context tokenizer
  (``metrics.context_tokenizer``): chunks are taken in rank order until ``B`` tokens
  (``recall@512tok``).
* ``<family>`` -- no parameter (``precision_omega``).

Conventions. Every family belongs to a convention (:attr:`MetricFamily.convention`):
``harness`` (this project's definitions, always reported) or ``chroma`` (the
``chroma_*`` families: Chroma's chunking_evaluation arithmetic, see
:mod:`harness.evaluation.metrics.chroma`), reported only with ``metrics.convention=chroma``
and then beside ours, never instead of them.

Units. A ranked list holds the *returned units* of one query: the retrieved chunks after
``chunker.expand`` (the chunks themselves for plain strategies, parents or windows for
small-to-big ones). The *returnable units* of a chunking are the image of ``expand`` over
every indexed chunk (:func:`harness.evaluation.metrics.ir.returnable_units`). Ideal rankings (nDCG),
divisors (AP) and PrecisionΩ range over the returnable units, judged per query; indexed
children that can never be returned are not counted anywhere.

The registry :data:`FAMILIES` is keyed by the *pattern* (``"recall@k"``,
``"recall@Btok"``, ``"precision_omega"``) because the same family name can exist with
different parameters (span recall at a rank cut-off and at a token budget). Each entry
gives the formula, range and source; the formulas are implemented in
:mod:`harness.evaluation.metrics.ranking` (span and rank metrics per query),
:mod:`harness.evaluation.metrics.ir` (qrels-based chunk and document metrics, computed with trec_eval)
:mod:`harness.evaluation.metrics.budget` (token-budget recall) and
:mod:`harness.evaluation.metrics.chroma` (the ``chroma_*`` families).

Each family names its provider (:attr:`MetricFamily.provider`, a key of
:data:`harness.evaluation.metrics.providers.PROVIDERS`: the function that computes it and the
condition under which it applies), which :func:`harness.evaluation.scoring.score_queries`
iterates, and its display roles (:data:`ROLES`: printed table, curve, headline, listed,
sweep), which :func:`families` answers in their declared order; no other module lists
family names.

:func:`mlflow_key` maps every name to an MLflow-safe key (MLflow rejects ``@``):
``recall@5`` -> ``recall_at_5``, ``recall@512tok`` -> ``recall_at_512tok``,
``precision_omega`` -> ``precision_omega``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Display roles a family can hold (:attr:`MetricFamily.roles`) and where each is read.
ROLES: dict[str, str] = {
    "table": "rows of the printed results tables (harness.experiment.pipeline.Evaluation.table and budget_table; the chroma_* families in their own table)",
    "curve": "lines of the metric@k-against-k figure (harness.reporting.charts)",
    "headline": "logged as MLflow metrics (harness.tracking.headline) and shown as the report's headline cards (harness.reporting.model)",
    "at_rank_k": "a headline family logged at the one rank cut-off harness.tracking.headline.HEADLINE_RANK_K instead of every k",
    "listed": "the one-line summaries: the run and job lines (harness.experiment.run), the sweep table "
    "(harness.tracking.callbacks) and the run listing (harness.evaluation.compare)",
    "sweep": "columns copied from each job into a sweep's summary table (harness.tracking.callbacks)",
}


def _roles(**positions: int) -> tuple[tuple[str, int], ...]:
    """``_roles(table=1, curve=1)`` -> ``(("table", 1), ("curve", 1))``: a family's roles with its position in each."""
    return tuple(positions.items())


@dataclass(frozen=True)
class MetricFamily:
    """One registered metric family.

    Attributes:
        name: family name as it appears in metric names (``recall``, ``ndcg``).
        param: ``"k"`` (rank cut-off, name ``name@k``), ``"budget"`` (token budget, name
            ``name@Btok``) or ``"none"`` (name alone).
        level: what is scored: ``span`` (characters), ``chunk`` (binary relevance of the
            returned units from spans under ``metrics.relevance``; ideal and divisors over
            the returnable units), ``document`` (document qrels) or
            ``context`` (tokens handed to a generator).
        range: value range, e.g. ``"[0, 1]"``.
        formula: definition for one query (the reported value is the mean over all
            labelled queries; a query with nothing retrieved scores 0 and is counted).
        source: where the definition comes from.
        convention: ``"harness"`` (always reported) or ``"chroma"`` (reported only with
            ``metrics.convention=chroma``, see :mod:`harness.evaluation.metrics.chroma`).
        provider: name of the :class:`~harness.evaluation.metrics.providers.Provider` in
            :data:`harness.evaluation.metrics.providers.PROVIDERS` that computes the family
            (one provider may compute several families, as an ir_measures provider serves
            several measures); :attr:`compute` is that provider.
        roles: ``((role, position), ...)``: where the family is shown, one of :data:`ROLES`
            each, with its 1-based position among the families of that role (the column or
            row order); empty when the family is reported only in the full tables.

    Raises:
        ValueError: on construction, an empty ``provider``, a role not in :data:`ROLES`, or a
            role listed twice.
    """

    name: str
    param: str
    level: str
    range: str
    formula: str
    source: str
    convention: str = "harness"
    provider: str = ""
    roles: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.provider:
            raise ValueError(f"metric family {self.pattern!r}: no provider; name the function that computes it")
        names = [r for r, _ in self.roles]
        for role in names:
            if role not in ROLES:
                raise ValueError(f"metric family {self.pattern!r}: unknown role {role!r}; expected one of {sorted(ROLES)}")
        if len(set(names)) != len(names):
            raise ValueError(f"metric family {self.pattern!r}: a role is listed twice in {self.roles!r}")

    @property
    def role_names(self) -> tuple[str, ...]:
        """The roles of the family, in :data:`ROLES` order."""
        return tuple(r for r in ROLES if r in dict(self.roles))

    def position(self, role: str) -> int | None:
        """The family's 1-based position among the families of ``role``; None without the role."""
        return dict(self.roles).get(role)

    @property
    def compute(self):
        """The :class:`~harness.evaluation.metrics.providers.Provider` that computes this family
        (imported on first use, so the registry stays free of heavy imports).

        Raises:
            KeyError: :attr:`provider` names no provider.
        """
        from harness.evaluation.metrics.providers import PROVIDERS

        return PROVIDERS[self.provider]

    @property
    def pattern(self) -> str:
        """Registry key: ``name@k``, ``name@Btok`` or ``name``."""
        return {"k": f"{self.name}@k", "budget": f"{self.name}@Btok", "none": self.name}[self.param]


_SPAN = "Smith & Troynikov, 'Evaluating Chunking Strategies for Retrieval', Chroma, 2024 (token-level metrics, computed here on characters)"
_CHROMA = "chunking_evaluation (Smith & Troynikov, Chroma 2024) conventions"
_CHROMA_ONLY = "; reported only with metrics.convention=chroma (see harness.evaluation.metrics.chroma)"
_IR = "standard IR definition (Manning et al., Introduction to IR, ch. 8); computed with trec_eval (pytrec-eval-terrier via ir-measures 0.4.3), cross-checked against ranx 0.3.21 in tests"


def _at_k(name: str, level: str, formula: str, source: str, provider: str, value_range: str = "[0, 1]", **roles: int) -> MetricFamily:
    """A ``harness``-convention family ``name@k`` (values in ``value_range``); ``roles`` as for :func:`_roles`."""
    return MetricFamily(name, "k", level, value_range, formula, source, provider=provider, roles=_roles(**roles))


def _at_budget(name: str, level: str, formula: str, source: str, **roles: int) -> MetricFamily:
    """A ``harness``-convention family ``name@Btok`` in ``[0, 1]``, computed by the ``budget`` provider."""
    return MetricFamily(name, "budget", level, "[0, 1]", formula, source, provider="budget", roles=_roles(**roles))


def _span_at_k(name: str, formula: str, **roles: int) -> MetricFamily:
    """A span family ``name@k`` of Smith & Troynikov, computed by the ``span_rank`` provider."""
    return _at_k(name, "span", formula, _SPAN, "span_rank", **roles)


def _chroma(name: str, param: str, formula: str, provider: str, **roles: int) -> MetricFamily:
    """A ``chroma``-convention span family in ``[0, 1]``, reported only with ``metrics.convention=chroma``."""
    return MetricFamily(name, param, "span", "[0, 1]", formula + _CHROMA_ONLY, _CHROMA, "chroma", provider=provider, roles=_roles(**roles))


_FAMILY_LIST = (
    # --- span metrics at rank cut-off k (E evidence chars, R_k union of top-k chunk spans)
    _span_at_k(
        "recall",
        "|E ∩ R_k| / |E|: share of evidence characters covered by the union of the top-k chunk spans",
        table=1,
        curve=1,
        sweep=1,
        headline=1,
        listed=1,
    ),
    _span_at_k(
        "precision",
        "|E ∩ R_k| / |R_k|: share of retrieved characters that are evidence; 0 if nothing retrieved",
        table=2,
        curve=2,
        sweep=2,
        headline=2,
        listed=2,
    ),
    _span_at_k("iou", "|E ∩ R_k| / |E ∪ R_k| in characters", table=3, curve=3, sweep=3, headline=4, listed=4),
    MetricFamily(
        "precision_omega",
        "none",
        "span",
        "[0, 1]",
        "|E ∩ Ω| / |Ω| where Ω is the union of the spans of every returnable unit (the image of chunker.expand "
        "over the indexed chunks: the chunks of a plain chunking, the parents or windows of small-to-big retrieval) "
        "that overlaps E (any overlap, independent of metrics.relevance); 0 if no unit overlaps E. Depends on the "
        "chunking only: the span precision of an ideal retriever that returns exactly the units touching the evidence",
        "PrecisionΩ of Smith & Troynikov (Chroma, 2024), on characters",
        provider="precision_omega",
    ),
    # --- span recall at a token budget
    _at_budget(
        "recall",
        "span",
        "|E ∩ R_B| / |E| where R_B is the source text of the ranked chunks taken in rank order until B context tokens; "
        "the chunk that crosses the budget contributes its first tokens only (character span of those tokens)",
        "this project (equal-context-budget comparison)",
        table=1,
        headline=1,
    ),
    _at_budget(
        "budget_filled",
        "context",
        "1 if the fetched ranked list held at least B context tokens, else 0 (the mean is the share of queries whose recall@Btok used the full budget)",
        "this project",
        table=2,
    ),
    # --- rank metrics on binary chunk relevance (metrics.relevance)
    _at_k(
        "context_precision",
        "chunk",
        "Σ_{i<=k} P@i · v_i / Σ_{i<=k} v_i, v_i = 1 if chunk i is relevant; 0 when no top-k chunk is relevant",
        "Es et al., 'RAGAS: Automated Evaluation of Retrieval Augmented Generation', 2023",
        "span_rank",
        table=4,
        sweep=4,
        headline=3,
        listed=3,
    ),
    _at_k("mrr", "chunk", "1 / rank of the first relevant chunk within the top k, else 0", _IR, "span_rank", table=5, sweep=5, headline=6, at_rank_k=2),
    _at_k(
        "chunk_precision",
        "chunk",
        "(# relevant chunks in the top k) / k; k is the divisor even when fewer than k chunks were retrieved",
        _IR,
        "chunk_ir",
        table=7,
    ),
    _at_k(
        "item_recall",
        "chunk",
        "(# distinct evidence spans e with a top-k chunk relevant to e) / (# distinct evidence spans)",
        "this project (evidence-item recall, as in BEIR-style recall with evidence spans as the items)",
        "item_recall",
        table=8,
    ),
    _at_k("hit_rate", "chunk", "1 if any top-k chunk is relevant, else 0", _IR, "chunk_ir", table=9),
    _at_k(
        "ndcg",
        "chunk",
        "DCG@k / IDCG@k, DCG@k = Σ_{i<=k} rel_i / log2(i + 1) over the returned units, rel_i in {0, 1}; "
        "IDCG@k = Σ_{i<=min(R, k)} 1 / log2(i + 1), R = # returnable units relevant to the query (the image of "
        "chunker.expand over the indexed chunks: distinct parents for return_unit=parent, windows for window, "
        "the chunks themselves for plain chunkers); 0 when R = 0",
        "Järvelin & Kekäläinen, 'Cumulated gain-based evaluation of IR techniques', TOIS 2002; " + _IR,
        "chunk_ir",
        table=10,
        sweep=6,
        headline=5,
        at_rank_k=1,
    ),
    _at_k(
        "map",
        "chunk",
        "AP@k = Σ_{i<=k} P@i · rel_i / R over the returned units, R = # returnable units relevant to the query "
        "(as for ndcg; children that are never returned do not count); 0 when R = 0 (trec_eval's AP with cut-off)",
        _IR,
        "chunk_ir",
        table=11,
    ),
    # --- document level (metrics.level=document)
    _at_k(
        "doc_recall",
        "document",
        "(# relevant documents among the top-k documents) / (# relevant documents); documents ranked by their best "
        "chunk (max-pooled chunk score); a document is relevant when it holds evidence",
        "BEIR (Thakur et al., 2021) document-level recall; " + _IR,
        "document",
        table=12,
    ),
    _at_k(
        "doc_ndcg",
        "document",
        "nDCG@k over the max-pooled document ranking with binary document relevance",
        "BEIR (Thakur et al., 2021); " + _IR,
        "document",
        table=13,
    ),
    # --- context size
    _at_k(
        "context_tokens",
        "context",
        "tokens of the top-k chunks' texts summed (what a generator reads), counted with metrics.context_tokenizer",
        "this project",
        "span_rank",
        "[0, ∞)",
        table=6,
        headline=7,
    ),
    # --- Chroma's conventions (metrics.convention=chroma only), beside ours; see metrics/chroma.py
    _chroma(
        "chroma_recall",
        "k",
        "N_k / Σ_r |r|: N_k the characters of the union of the closed intersections of the top-k units' spans with the "
        "evidence spans r of their own document; the denominator sums the evidence span lengths (overlapping spans "
        "count twice); 0 without evidence",
        "chroma_span",
        table=1,
    ),
    _chroma(
        "chroma_precision",
        "k",
        "N_k / Σ_{c in top k} |c|: the lengths of all top-k units summed (units of other documents count; overlapping or "
        "repeated units count twice); 0 if nothing retrieved",
        "chroma_span",
        table=2,
    ),
    _chroma(
        "chroma_iou",
        "k",
        "N_k / (Σ_{c in top k} |c| + Σ |unused_k|), unused_k the evidence spans minus every intersection with a top-k unit",
        "chroma_span",
        table=3,
    ),
    _chroma(
        "chroma_precision_omega",
        "none",
        "N_Ω / |D ∪ unused_Ω| over every returnable unit of the evidence documents: N_Ω the characters of the union of their "
        "closed intersections with the evidence spans, D the union of the spans of the units with an intersection (a unit "
        "that only touches the evidence counts), unused_Ω the evidence no unit intersects; 0 when the denominator is 0",
        "chroma_precision_omega",
    ),
)

#: Every registered metric family, keyed by pattern (``recall@k``, ``recall@Btok``, ``precision_omega``).
FAMILIES: dict[str, MetricFamily] = {f.pattern: f for f in _FAMILY_LIST}

#: Families with a rank cut-off: name -> (range, one-line definition). Kept for callers of
#: the first version of this module, so it holds this project's convention only (no
#: ``chroma_*`` family); :data:`FAMILIES` is the full registry.
METRICS: dict[str, tuple[str, str]] = {f.name: (f.range, f.formula) for f in _FAMILY_LIST if f.param == "k" and f.convention == "harness"}


def families(role: str, param: str = "k", convention: str = "harness") -> tuple[str, ...]:
    """Names of the registered families holding ``role``, in the role's declared order.

    Args:
        role: one of :data:`ROLES` (``"table"``, ``"headline"``, ...).
        param: ``"k"``, ``"budget"`` or ``"none"``: only families of that parameter kind.
        convention: only families of that :attr:`MetricFamily.convention`.

    Returns:
        e.g. ``families("curve")`` -> ``("recall", "precision", "iou")``; a name appears once.

    Raises:
        ValueError: ``role`` is not in :data:`ROLES`.
    """
    if role not in ROLES:
        raise ValueError(f"unknown metric role {role!r}; expected one of {sorted(ROLES)}")
    held = [f for f in _FAMILY_LIST if f.param == param and f.convention == convention and f.position(role) is not None]
    return tuple(f.name for f in sorted(held, key=lambda f: f.position(role)))


_NAME = re.compile(r"^(?P<name>[a-z_]+)@(?P<k>[1-9][0-9]*)$")
_BUDGET = re.compile(r"^(?P<name>[a-z_]+)@(?P<b>[1-9][0-9]*)tok$")


def split_cutoff(name: str) -> tuple[str, int] | None:
    """``("recall", 5)`` for ``"recall@5"``: a lowercase family name and a rank cut-off
    ``k >= 1``; None for anything else (the family is not checked against a registry)."""
    m = _NAME.match(name)
    return (m["name"], int(m["k"])) if m else None


@dataclass(frozen=True)
class MetricName:
    """A parsed metric name.

    Attributes:
        family: the registered :class:`MetricFamily`.
        k: rank cut-off (``param == "k"``), else None.
        budget: token budget (``param == "budget"``), else None.
    """

    family: MetricFamily
    k: int | None = None
    budget: int | None = None

    def __str__(self) -> str:
        f = self.family
        return {"k": f"{f.name}@{self.k}", "budget": f"{f.name}@{self.budget}tok", "none": f.name}[f.param]


def parse_name(name: str) -> MetricName:
    """Parse any registered metric name: ``recall@5``, ``recall@512tok``, ``precision_omega``.

    Raises:
        ValueError: the name matches no registered family with its parameter kind, or a
            cut-off/budget is < 1. The message lists the registered patterns.
    """
    cut = split_cutoff(name)
    if cut and f"{cut[0]}@k" in FAMILIES:
        return MetricName(FAMILIES[f"{cut[0]}@k"], k=cut[1])
    m = _BUDGET.match(name)
    if m and f"{m['name']}@Btok" in FAMILIES:
        return MetricName(FAMILIES[f"{m['name']}@Btok"], budget=int(m["b"]))
    if name in FAMILIES and FAMILIES[name].param == "none":
        return MetricName(FAMILIES[name])
    raise ValueError(f"unknown metric {name!r}; expected one of the patterns {sorted(FAMILIES)} with k >= 1 and B >= 1")


def is_metric_name(name: str) -> bool:
    """True when :func:`parse_name` accepts ``name``."""
    try:
        parse_name(name)
    except ValueError:
        return False
    return True


def parse_metric(name: str) -> tuple[str, int]:
    """Split a rank cut-off name ``"recall@5"`` into ``("recall", 5)``.

    Only ``<family>@<k>`` names are accepted (use :func:`parse_name` for budgets and
    parameterless names).

    Raises:
        ValueError: not of the form ``<family>@<k>`` with a registered family and k >= 1.
    """
    cut = split_cutoff(name)
    if cut is None or cut[0] not in METRICS:
        raise ValueError(f"unknown metric {name!r}; expected <family>@<k> with family in {sorted(METRICS)} and k >= 1")
    return cut


def metric_names(
    ks: list[int] | tuple[int, ...],
    budgets: list[int] | tuple[int, ...] = (),
    level: str = "chunk",
    context_tokens: bool = True,
    convention: str = "harness",
) -> list[str]:
    """Every metric name one evaluation reports, in registry order.

    Args:
        ks: rank cut-offs.
        budgets: token budgets (empty: no budget metrics).
        level: ``chunk`` or ``document`` (document adds the ``doc_*`` families).
        context_tokens: include ``context_tokens@k``.
        convention: ``harness`` (ours only) or ``chroma`` (adds the ``chroma_*`` families,
            ``metrics.convention``).
    """
    out: list[str] = []
    for f in _FAMILY_LIST:
        if f.level == "document" and level != "document":
            continue
        if f.convention != "harness" and f.convention != convention:
            continue
        if f.name == "context_tokens" and not context_tokens:
            continue
        if f.param == "k":
            out += [f"{f.name}@{k}" for k in ks]
        elif f.param == "budget":
            out += [f"{f.name}@{b}tok" for b in budgets]
        else:
            out.append(f.name)
    return out


def mlflow_key(name: str) -> str:
    """MLflow-safe metric key: ``"recall@5"`` -> ``"recall_at_5"``, ``"recall@512tok"`` ->
    ``"recall_at_512tok"``; other names pass through with characters outside
    ``[A-Za-z0-9_./ -]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_./ -]", "_", name.replace("@", "_at_"))


def parse_range(text: str) -> tuple[float, float]:
    """The bounds of a documented range string: ``"[0, 1]"`` -> ``(0.0, 1.0)``, ``"[0, ∞)"``
    -> ``(0.0, inf)``, ``"[-1, 1]"`` -> ``(-1.0, 1.0)``. Closed and open ends parse alike
    (a value must be finite, so an open ``∞`` end excludes only infinity).

    Raises:
        ValueError: ``text`` is not ``[lo, hi]`` / ``[lo, hi)`` with numbers or ``∞``, or ``lo > hi``.
    """
    m = re.fullmatch(r"\s*[\[(]\s*(-?[0-9.]+|-∞)\s*,\s*(-?[0-9.]+|∞)\s*[\])]\s*", text)
    if m is None:
        raise ValueError(f"range {text!r}: expected '[lo, hi]' or '[lo, ∞)' with numbers")
    lo, hi = (float(v.replace("∞", "inf")) for v in m.groups())
    if lo > hi:
        raise ValueError(f"range {text!r}: lower bound above the upper bound")
    return lo, hi


def family_bounds(family: MetricFamily) -> tuple[float, float]:
    """``(lo, hi)`` of a family's documented :attr:`MetricFamily.range` (see :func:`parse_range`)."""
    return parse_range(family.range)


@dataclass(frozen=True)
class RunValue:
    """One kind of value a run logs besides the metric families (counters, statistics, timings).

    Attributes:
        pattern: the name as a regular expression over the logged name (``@`` form or
            MLflow key, e.g. ``time\\.[a-z_]+_s``); matched in full.
        example: one concrete name.
        range: documented value range, as :attr:`MetricFamily.range` (``"[0, 1]"``, ``"[0, ∞)"``).
        unit: what is counted or measured (``share``, ``characters``, ``seconds``, ...).
        meaning: one line on what the value is and where it comes from.
    """

    pattern: str
    example: str
    range: str
    unit: str
    meaning: str


_AT = r"@[1-9][0-9]*"
_COUNT = "[0, ∞)"

#: Every other value a run logs (``harness.experiment.run.metric_groups``), with its range:
#: together with :data:`FAMILIES` (and their ``_ci_low`` / ``_ci_high`` bootstrap bounds and
#: ``compressed.<family>@k``) this documents every number of a run; :func:`value_bounds`
#: refuses a name neither lists.
RUN_VALUES: tuple[RunValue, ...] = (
    RunValue("recall_curve", "recall_curve", "[0, 1]", "share", "recall@k logged against step=k, one point per metrics.ks"),
    RunValue(r"compression\.precision_gain" + _AT, "compression.precision_gain@5", "[-1, 1]", "share", "compressed.precision@k - precision@k"),
    RunValue(r"compression\.tokens_saved" + _AT, "compression.tokens_saved@5", _COUNT, "context tokens", "context_tokens@k - compressed.context_tokens@k"),
    RunValue(
        r"diagnostics\.(not_covered|boundary_split|truncated|rank_miss|missed)" + _AT,
        "diagnostics.missed@5",
        "[0, 1]",
        "share of queries",
        "queries missed at k for each reason, and for any (harness.evaluation.diagnostics)",
    ),
    RunValue(
        r"diagnostics\.miss_with_candidate" + _AT,
        "diagnostics.miss_with_candidate@5",
        "[0, 1]",
        "share of queries",
        "queries missed at k whose top k holds a likely unlabelled statement of the answer (harness.evaluation.audit; <= diagnostics.missed@k)",
    ),
    RunValue(
        r"chunks\.(coverage|coverage_nonspace|single_chunk_documents|evidence_contained_rate|boundary_split_rate|evidence_uncovered_rate|truncated_fraction|degenerate_chunking)",
        "chunks.coverage",
        "[0, 1]",
        "share",
        "chunk-set shares (harness.evaluation.diagnostics.chunk_set_statistics); degenerate_chunking is 0 or 1",
    ),
    RunValue(r"chunks\.redundancy", "chunks.redundancy", "[1, ∞)", "ratio", "chunk characters / covered characters (> 1 with overlap)"),
    RunValue(
        r"chunks\.(n_chunks|n_documents|n_duplicate_texts|n_evidence_spans|n_truncated|max_seq_length|evidence_uncovered_chars)",
        "chunks.n_chunks",
        _COUNT,
        "count",
        "chunk-set counts; evidence_uncovered_chars: evidence characters in no returnable unit, summed over queries",
    ),
    RunValue(
        r"chunks\.(chars|tokens)_(min|max|mean|median|std|p50|p90|p99)",
        "chunks.chars_mean",
        _COUNT,
        "characters or model tokens",
        "chunk size statistics",
    ),
    RunValue(r"cache\.chunks_cached", "cache.chunks_cached", "[0, 1]", "flag", "1 when the chunk set was read from the chunk cache"),
    RunValue(r"cache\.(embedded_texts|embedding_hits)", "cache.embedded_texts", _COUNT, "texts", "texts embedded, and read from the embedding cache"),
    RunValue(r"dataset\.[a-z_]+", "dataset.queries_without_evidence", _COUNT, "records", "records the loader dropped or could not resolve"),
    RunValue(
        r"embedding\.(texts_embedded|cache_hits|texts_shared|texts_over_window|window_tokens|window_text_tokens|ray_workers|tokens_embedded|requests|retries|texts_cut)",
        "embedding.texts_embedded",
        _COUNT,
        "count",
        "the encoder's counters (harness.embeddings)",
    ),
    RunValue(
        r"queries\.n_failed",
        "queries.n_failed",
        _COUNT,
        "queries",
        "queries with a non-finite per-query value, scored 0 and kept in every mean (harness.evaluation.stats.query_mean)",
    ),
    RunValue(
        r"ties\.crossing_at_[1-9][0-9]*",
        "ties.crossing_at_5",
        _COUNT,
        "queries",
        "queries whose top-k set the tie rule decides: equal scores at ranks k and k+1",
    ),
    RunValue(
        r"embedding\.zero_vectors",
        "embedding.zero_vectors",
        _COUNT,
        "texts",
        "texts whose vector is all zeros (kept, warned about; they score 0 against everything)",
    ),
    RunValue(r"embedding\.(distill_s|cost_usd)", "embedding.distill_s", _COUNT, "seconds or US dollars", "static-model distillation time; API cost"),
    RunValue(r"time\.[a-z_]+_s", "time.total_s", _COUNT, "seconds", "wall time of one phase of the run"),
    RunValue(r"retriever\.ann_recall_at_(10|depth)", "retriever.ann_recall_at_10", "[0, 1]", "share", "approximate-index recall against exact search"),
    RunValue(
        r"retriever\.[a-z_]+", "retriever.ann_build_seconds", _COUNT, "seconds or count", "approximate-index sizes and timings (harness.retrievers.faiss)"
    ),
    RunValue(
        r"(llm|agentic|adapter|rerank)\.[a-z_.]+", "llm.calls", _COUNT, "count", "counters of LLM calls, agentic windows, adapter alignment, reranked pairs"
    ),
)

_RUN_VALUES = [(re.compile(v.pattern), v) for v in RUN_VALUES]
_KEY_AT = re.compile(r"_at_([1-9][0-9]*(?:tok)?)(?=$|_ci_)")


def value_bounds(name: str) -> tuple[float, float]:
    """The documented range ``(lo, hi)`` of any value a run logs, by its name or MLflow key.

    Looks up, in order: a metric family (:func:`parse_name`: ``recall@5``, ``recall_at_5``,
    ``precision_omega``); its bootstrap bounds (``recall_at_5_ci_low`` / ``_ci_high``: the
    metric's range); ``compressed.<family>@k`` (the family's range); :data:`RUN_VALUES`.
    An MLflow key is read back by turning ``_at_<k>`` / ``_at_<B>tok`` at the end (or before
    ``_ci_``) into ``@``.

    Raises:
        ValueError: nothing documents ``name`` (the message names it and where to add it).
    """
    base = name
    for suffix in ("_ci_low", "_ci_high"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    for candidate in dict.fromkeys((base, _KEY_AT.sub(r"@\1", base))):
        inner = candidate.removeprefix("compressed.")
        if is_metric_name(inner):
            return family_bounds(parse_name(inner).family)
        for pattern, value in _RUN_VALUES:
            if pattern.fullmatch(candidate):
                return parse_range(value.range)
    raise ValueError(
        f"logged value {name!r} has no documented range: add its family to FAMILIES or its pattern to RUN_VALUES in harness/evaluation/metrics/__init__.py"
    )
