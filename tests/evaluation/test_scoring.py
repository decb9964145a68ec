"""Scoring by the registry: every family names its provider and roles, score_queries iterates
the providers (each skipped by its declared condition), and no module outside the registry
re-states which families are headline, curve or listed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.chunkers.base import Chunker
from harness.chunkers.fixed import FixedChunker
from harness.chunkers.hierarchical import HierarchicalChunker
from harness.evaluation import scoring
from harness.evaluation.metrics import FAMILIES, ROLES, budget, chroma, families, parse_name
from harness.evaluation.metrics import providers as pv
from harness.evaluation.metrics import span as sp
from harness.evaluation.metrics.ir import ChunkIndex, chunk_ir_metrics, chunk_qrels, document_metrics, item_recall, precision_omega, returnable_units
from harness.evaluation.metrics.ranking import query_metrics
from harness.experiment.pipeline import EvaluationTools, evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import ranked
from harness.retrievers.bm25 import BM25Retriever
from harness.text.units import WordCounter

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
KS = [1, 3, 5]
BUDGETS = [32, 128]
#: ``metrics.budget_depth`` of the runs below: returned units the budget metrics read.
DEPTH = 12


def test_every_family_names_a_callable_provider_and_declared_roles():
    for pattern, family in FAMILIES.items():
        provider = family.compute
        assert isinstance(provider, pv.Provider), pattern
        assert provider.name == family.provider
        assert callable(provider.compute) and callable(provider.applies), pattern
        assert set(family.role_names) <= set(ROLES), pattern
    # every provider serves at least one family, and positions within a role are distinct
    assert {f.provider for f in FAMILIES.values()} == set(pv.PROVIDERS)
    for role in ROLES:
        for param in ("k", "budget", "none"):
            for convention in ("harness", "chroma"):
                held = [f.position(role) for f in FAMILIES.values() if f.param == param and f.convention == convention and f.position(role) is not None]
                assert len(held) == len(set(held)), (role, param, convention)


def test_a_family_without_provider_or_with_an_unknown_role_is_refused():
    from harness.evaluation.metrics import MetricFamily

    with pytest.raises(ValueError, match="no provider"):
        MetricFamily("x", "k", "span", "[0, 1]", "f", "s")
    with pytest.raises(ValueError, match="unknown role 'hedline'"):
        MetricFamily("x", "k", "span", "[0, 1]", "f", "s", provider="span_rank", roles=(("hedline", 1),))
    with pytest.raises(ValueError, match="unknown metric role"):
        families("hedline")


def test_role_queries_give_the_shown_families_in_order():
    # the orders the printed table, the MLflow headline and the report cards have always had
    assert families("table")[:6] == ("recall", "precision", "iou", "context_precision", "mrr", "context_tokens")
    assert families("table", param="budget") == ("recall", "budget_filled")
    assert families("table", convention="chroma") == ("chroma_recall", "chroma_precision", "chroma_iou")
    assert families("listed") == ("recall", "precision", "context_precision", "iou")
    assert families("curve") == ("recall", "precision", "iou")
    assert set(families("at_rank_k")) <= set(families("headline"))
    assert families("headline", param="budget") == ("recall",)


def _hand_written(ev, dataset, chunker, settings, count, token_ends):
    """The per-query values as the scoring computed them before the registry dispatch: each
    metric function called by hand, in the old order."""
    by_id = {c.chunk_id: c for c in ev.chunks}
    documents = dataset.by_id
    fraction, rule = settings.relevance_fraction, settings.relevance
    rows, scored = {}, {}
    for q in dataset.queries:
        expanded = chunker.expand([by_id[cid] for cid in ranked(ev.run, q.query_id)], documents)
        top = expanded[: max(KS)]
        scored[q.query_id] = top
        m = query_metrics(q, top, KS, fraction, count, relevance=rule)
        m.update(item_recall(q, top, KS, fraction, rule))
        m.update(chroma.retrieval_metrics(q, top, KS))
        m.update(budget.budget_recall(q, expanded[:DEPTH], BUDGETS, token_ends, documents))
        rows[q.query_id] = m
    units = returnable_units(ev.chunks, None if type(chunker).expand is Chunker.expand else chunker.expand, documents)
    index = ChunkIndex(units)
    qrels = chunk_qrels(dataset.queries, index, fraction, rule, returned=scored)
    ir = chunk_ir_metrics(qrels, {qid: [c.chunk_id for c in cs] for qid, cs in scored.items()}, KS)
    doc = document_metrics(dataset.queries, ev.run, {c.chunk_id: c.doc_id for c in ev.chunks}, KS)
    by_doc = chroma.units_by_document(units)
    returnable = sp.span_set((u.doc_id, s) for u in units for s in u.spans)
    for q in dataset.queries:
        m = rows[q.query_id]
        m.update(ir[q.query_id])
        m.update(doc[q.query_id])
        m["precision_omega"] = precision_omega(q, index)
        m["chroma_precision_omega"] = chroma.precision_omega(q, by_doc)
        m["n_relevant_chunks"] = len(qrels[q.query_id])
        evidence = sp.span_set((e.doc_id, e.span) for e in q.evidence)
        m["evidence_uncovered_chars"] = sp.size(evidence) - sp.intersection_size(evidence, returnable)
    return rows


@pytest.mark.parametrize(
    "chunker",
    [FixedChunker(chunk_size=400, unit="chars"), HierarchicalChunker(mode="headings", parent_size=200, child_size=40, unit="words")],
    ids=["fixed", "small-to-big"],
)
def test_score_queries_rows_equal_the_metric_functions_value_for_value(kestrel, chunker):
    words = WordCounter()
    settings = default_metric_settings(ks=KS, budgets=BUDGETS, budget_depth=DEPTH, level="document", convention="chroma")
    tools = EvaluationTools(context_tokenizer=words, context_token_counter=words.count)
    ev = evaluate(kestrel, chunker, BM25Retriever(), settings, tools, progress=False)

    from harness.experiment.pipeline import _token_ends

    expected = _hand_written(ev, kestrel, chunker, settings, words.count, _token_ends(words))
    head = ["query_id", "query", "n_evidence", "evidence_chars"]
    some = next(iter(expected.values()))
    columns = [c for c in ev.per_query.columns if not c.startswith("miss_reason_at_")]
    assert columns == head + list(some) + ["retrieved"]
    for row in ev.per_query.to_dict("records"):
        want = expected[row["query_id"]]
        assert {k: row[k] for k in want} == want, row["query_id"]


def test_score_queries_iterates_the_registry_and_skips_by_declared_condition(kestrel, monkeypatch):
    chunker = FixedChunker(chunk_size=400, unit="chars")
    plain = evaluate(kestrel, chunker, BM25Retriever(), default_metric_settings(ks=KS, budgets=[]), progress=False)
    names = {c for c in plain.per_query.columns if "@" in c or c.endswith("omega")}
    present = {parse_name(n).family.provider for n in names}
    # conditions: chroma convention off, no budgets, chunk level -> those providers never ran
    assert present == {"span_rank", "item_recall", "chunk_ir", "precision_omega"}
    # a provider added to the table is computed and lands in the rows, in table order
    extra = pv.Provider("probe", lambda ctx: {q.query_id: {"probe@1": 0.25} for q in ctx.queries}, lambda ctx: True, "test")
    monkeypatch.setitem(pv.PROVIDERS, "probe", extra)
    rows, _ = scoring.score_queries(kestrel, plain.run, plain.chunks, default_metric_settings(ks=KS, budgets=[]), KS, [], max(KS), None, None, False)
    assert all(r["probe@1"] == 0.25 for r in rows)
    assert list(rows[0])[-4:] == ["probe@1", "n_relevant_chunks", "evidence_uncovered_chars", "retrieved"]
    # a declared condition that says no removes the family without any branch in score_queries
    monkeypatch.setitem(pv.PROVIDERS, "item_recall", pv.Provider("item_recall", pv.PROVIDERS["item_recall"].compute, lambda ctx: False, "test"))
    rows, _ = scoring.score_queries(kestrel, plain.run, plain.chunks, default_metric_settings(ks=KS, budgets=[]), KS, [], max(KS), None, None, False)
    assert not any(k.startswith("item_recall@") for k in rows[0])


def test_each_provider_computes_exactly_the_families_that_name_it(kestrel):
    words = WordCounter()
    settings = default_metric_settings(ks=KS, budgets=BUDGETS, budget_depth=DEPTH, level="document", convention="chroma")
    tools = EvaluationTools(context_tokenizer=words, context_token_counter=words.count)
    ev = evaluate(kestrel, FixedChunker(chunk_size=400, unit="chars"), BM25Retriever(), settings, tools, progress=False)
    by_provider: dict[str, set[str]] = {}
    for name in ev.per_query.columns:
        if "@" in name or name.endswith("omega"):
            family = parse_name(name).family
            by_provider.setdefault(family.provider, set()).add(family.pattern)
    declared: dict[str, set[str]] = {}
    for pattern, family in FAMILIES.items():
        declared.setdefault(family.provider, set()).add(pattern)
    assert by_provider == declared


def _family_names() -> set[str]:
    return {f.name for f in FAMILIES.values()}


def _hard_coded_lists(path: Path) -> list[tuple[int, list[str]]]:
    """Tuple, list and set literals of two or more strings that are all registered family names."""
    names = _family_names()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.elts) and all(v in names for v in values):
                found.append((node.lineno, values))
    return found


def test_no_module_outside_the_registry_hard_codes_a_list_of_families():
    registry = PACKAGE / "evaluation" / "metrics"
    offenders = {str(p.relative_to(PACKAGE)): hits for p in sorted(PACKAGE.rglob("*.py")) if registry not in p.parents and (hits := _hard_coded_lists(p))}
    assert offenders == {}, "use harness.evaluation.metrics.families(role) instead"


def test_the_list_finder_sees_a_hard_coded_list(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('SHOWN = ("recall", "precision", "iou")\nOTHER = ("recall", "why")\n', encoding="utf-8")
    assert _hard_coded_lists(probe) == [(1, ["recall", "precision", "iou"])]
