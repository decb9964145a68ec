"""jinja2 templates of the report pages (kept in Python so they ship with the package)."""

BASE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="harness report">
<title>{% block title %}{% endblock %}</title>
<style>{{ css|safe }}</style>
</head><body>
{% block body %}{% endblock %}
{% for p in payloads|default([]) %}<script type="application/json" class="doc" id="doc-{{ loop.index0 }}">{{ p|safe }}</script>
{% endfor %}
<script>{{ js|safe }}</script>
</body></html>
"""

CARDS = """{% macro card(name, value, ci=None, conf=None) -%}
<div class="card" data-metric="{{ name }}" data-value="{{ value|full }}">
<div class="name">{{ name }}</div><div class="value">{{ value|fmt }}</div>
{% if ci %}<div class="ci" data-ci-low="{{ ci[0]|full }}" data-ci-high="{{ ci[1]|full }}">{{ (conf * 100)|round|int }}% CI [{{ ci[0]|fmt }}, {{ ci[1]|fmt }}]</div>{% endif %}
</div>
{%- endmacro %}
{% macro reason(r) -%}
{% if r %}<span class="reason {{ r }}">{{ r }}</span>{% else %}<span class="reason hit">hit</span>{% endif %}
{%- endmacro %}
{% macro doclist(docs, runs) -%}
<div class="doclist">
{% for d in docs %}<button data-doc="{{ d.i }}" data-open="{{ d.i }}">{{ d.id }}<div class="meta">{{ d.chars }} chars · {{ d.chunks|join(' / ') }} chunks · {{ d.evidence }} evidence</div></button>
{% endfor %}
</div>
{%- endmacro %}
{% macro legend(window) -%}
<div class="legend muted"><span style="background:var(--c0)">chunk</span><span style="background:var(--c1)">next chunk</span><span style="background:var(--ov)">overlap of two chunks</span><span style="background:var(--ev);outline:1px solid var(--ev-border)">evidence</span>{% if window %}<span style="box-shadow:inset 0 -2px 0 var(--big)">chunk over the {{ window }}-token model window</span>{% endif %}<span class="cut">n</span> chunk n starts</div>
{%- endmacro %}
"""

RUN = """{% extends "base.html" %}{% from "cards.html" import card, reason, doclist, legend %}
{% block title %}{{ view.name }} · run report{% endblock %}
{% block body %}
<header><h1>{{ view.name }}</h1>
<div class="sub">run <code>{{ view.run_id }}</code> · experiment {{ view.experiment }}{% for key, value in view.labels.items() %} · {{ key }} <b>{{ value }}</b>{% endfor %}{% if links.get("run") %} · <a href="{{ links.run }}">in MLflow</a>{% endif %}</div></header>
<nav><a href="#metrics">Metrics</a><a href="#charts">Charts</a><a href="#documents">Documents</a><a href="#queries">Queries</a></nav>
<main>
<section id="metrics"><h2>Headline metrics (mean over {{ view.queries|length }} queries, k = {{ k }})</h2>
<div class="cards">{% for name, value, ci in headline %}{{ card(name, value, ci, view.confidence) }}{% endfor %}</div>
<p class="muted">{{ view.chunks|length }} chunks{% if view.max_seq_length %}; {{ over_window }} over the model's {{ view.max_seq_length }}-token window{% endif %}; {{ n_missed }} of {{ view.queries|length }} queries missed at k={{ k }}
({% for r in reasons %}{{ r }} {{ counts.get(r, 0) }}{% if not loop.last %}, {% endif %}{% endfor %}).</p>
<dl class="reasons">{% for r in reasons %}<dt>{{ reason(r) }}</dt><dd>{{ reason_text[r] }}</dd>{% endfor %}</dl>
<p class="muted">Miss reasons are defined in the project's docs/evaluation.md (section Diagnostics).</p>
</section>
<section id="charts"><h2>Charts</h2><div class="charts">
{% for caption, svg in figures %}<figure><figcaption>{{ caption }}</figcaption>{{ svg|safe }}</figure>{% endfor %}
</div></section>
<section id="documents"><h2>Documents: where the chunker cut</h2>
{{ legend(view.max_seq_length) }}
<div class="viewer">{{ doclist(docs, 1) }}
<div class="docpane"><h3 id="doc-title-0"></h3><div class="doctext" data-docview data-run="0" data-title="doc-title-0"></div></div></div>
</section>
<section id="queries"><h2>Queries: what was retrieved</h2>
<div class="controls"><label><input type="checkbox" id="misses-only"> only the {{ n_missed }} queries missed at k={{ k }}</label> · click a query for its evidence and its top-{{ view.ks|max }}</div>
<table class="qtable"><thead><tr><th class="sortable">query</th><th>text</th><th class="sortable num">recall@{{ k }}</th><th class="sortable">at k={{ k }}</th><th class="sortable num">top-{{ k }} chunks on evidence</th></tr></thead><tbody>
{% for q in query_rows %}<tr class="q" data-query="{{ q.id }}" data-missed="{{ 1 if q.missed else 0 }}"><td>{{ q.id }}</td><td>{{ q.text }}</td><td class="num" data-value="{{ q.recall|full }}" data-sort="{{ q.recall|full }}">{{ q.recall|fmt }}</td><td data-sort="{{ q.reason or '' }}">{{ reason(q.reason) }}</td><td class="num">{{ q.overlapping }}</td></tr>
{% endfor %}</tbody></table>
<script type="application/json" id="query-data">{{ query_json|safe }}</script>
</section>
</main>
{% endblock %}
"""

PAIR = """{% extends "base.html" %}{% from "cards.html" import reason, doclist, legend %}
{% block title %}{{ a.name }} vs {{ b.name }}{% endblock %}
{% block body %}
<header><h1>A: {{ a.name }} &nbsp;vs&nbsp; B: {{ b.name }}</h1>
<div class="sub">runs <code>{{ a.run_id }}</code> and <code>{{ b.run_id }}</code> · dataset {{ a.labels.get('dataset', '') }} ({{ a.queries|length }} queries)</div></header>
<nav><a href="#metrics">Metrics</a><a href="#documents">Same document, two chunkings</a><a href="#wins">Queries A wins</a><a href="#losses">Queries B wins</a></nav>
<main>
<section id="metrics"><h2>Mean metrics</h2>
<table><thead><tr><th>metric</th><th class="num">A</th><th class="num">B</th><th class="num">A − B</th></tr></thead><tbody>
{% for name, va, vb in metrics %}<tr data-metric="{{ name }}"><td>{{ name }}</td><td class="num" data-value="{{ va|full }}">{{ va|fmt }}</td><td class="num" data-value="{{ vb|full }}">{{ vb|fmt }}</td><td class="num">{{ (va - vb)|fmt }}</td></tr>
{% endfor %}</tbody></table>
<p class="muted">Per query on {{ metric }}: A higher on {{ wins.a|length }}, B higher on {{ wins.b|length }}, tied on {{ n_tied }}. For paired tests: <code>harness compare runs {{ b.run_id }} {{ a.run_id }}</code>.</p>
</section>
<section id="documents"><h2>The same document cut both ways</h2>
{{ legend(a.max_seq_length) }}
<div class="viewer">{{ doclist(docs, 2) }}
<div class="docpane pair">
<div><h3>A: {{ a.name }} · <span id="doc-title-a"></span></h3><div class="doctext" data-docview data-run="0" data-title="doc-title-a"></div></div>
<div><h3>B: {{ b.name }} · <span id="doc-title-b"></span></h3><div class="doctext" data-docview data-run="1" data-title="doc-title-b"></div></div>
</div></div>
</section>
{% for side, title, anchor in (("a", "Queries A wins (" ~ metric ~ " higher in A)", "wins"), ("b", "Queries B wins (" ~ metric ~ " higher in B)", "losses")) %}
<section id="{{ anchor }}"><h2>{{ title }}: {{ wins[side]|length }}</h2>
<table class="qtable" data-side="{{ side }}"><thead><tr><th class="sortable">query</th><th>text</th><th class="sortable num">A {{ metric }}</th><th class="sortable num">B {{ metric }}</th><th>A at k={{ k }}</th><th>B at k={{ k }}</th></tr></thead><tbody>
{% for q in wins[side] %}<tr class="q" data-query="{{ q.id }}" data-missed="1"><td>{{ q.id }}</td><td>{{ q.text }}</td><td class="num" data-value="{{ q.a|full }}">{{ q.a|fmt }}</td><td class="num" data-value="{{ q.b|full }}">{{ q.b|fmt }}</td><td>{{ reason(q.reason_a) }}</td><td>{{ reason(q.reason_b) }}</td></tr>
{% endfor %}</tbody></table></section>
{% endfor %}
<script type="application/json" id="query-data">{{ query_json|safe }}</script>
<script>document.addEventListener("DOMContentLoaded", function () { window.harnessOpenDoc({{ first_doc }}); });</script>
</main>
{% endblock %}
"""

SWEEP = """{% extends "base.html" %}
{% block title %}{{ view.name }} · sweep report{% endblock %}
{% block body %}
<header><h1>{{ view.name }}</h1>
<div class="sub">sweep parent run <code>{{ view.run_id }}</code>{% if view.experiment %} · experiment {{ view.experiment }}{% endif %} · objective {{ view.objective }} · {{ view.jobs|length }} jobs{% for s, n in counts.items() if n %} · {{ n }} {{ s|lower }}{% endfor %}</div></header>
<nav><a href="#best">Best</a><a href="#top-set">Top set</a><a href="#jobs">Jobs</a><a href="#charts">Charts</a><a href="#comparison">Best vs baseline</a><a href="#best-report">Best job: cuts and misses</a></nav>
<main>
<section id="best"><h2>Best job</h2>
{% if best %}<p class="best-run" data-run="{{ best.run_id }}" data-value="{{ best.metrics[view.objective]|full }}"><b>{{ best.name }}</b> (job {{ best.job }}): {{ view.objective }} = <b>{{ best.metrics[view.objective]|fmt }}</b>{% if view.objective in best.cis %} (95% CI [{{ best.cis[view.objective][0]|fmt }}, {{ best.cis[view.objective][1]|fmt }}]){% endif %}{% if best.link %} · <a href="{{ best.link }}">its report</a>{% endif %}</p>
{% else %}<p>No finished job logged {{ view.objective }}.</p>{% endif %}
</section>
<section id="top-set"><h2>Top set: not significantly worse than the best</h2>
{% if view.top_set %}<p>{{ view.top_set|length }} job(s) by {{ view.objective }}; a job leaves the set only when it is shown worse than the best ({{ view.top_test }}).{% if view.top_set|length > 1 %} They are tied on this evidence: the tie-breakers below say which one each rule would ship.{% endif %}</p>
<table id="top-set-table"><thead><tr><th class="num">job</th><th>run</th><th class="num">{{ view.objective }}</th><th class="num">p</th><th class="num">p (Holm)</th>{% for m in view.tie_metrics %}<th class="num">{{ m }}</th>{% endfor %}</tr></thead><tbody>
{% for r in view.top_set %}<tr data-job="{{ r.job }}" data-run="{{ r.run_id }}"><td class="num">{{ r.job }}</td><td>{{ r.name }}{% if r.best %} (best){% endif %}</td><td class="num" data-value="{{ r.mean|full }}">{{ r.mean|fmt }}</td><td class="num">{% if r.p is not none %}{{ r.p|fmt(3) }}{% endif %}</td><td class="num">{% if r.p_holm is not none %}{{ r.p_holm|fmt(3) }}{% endif %}</td>{% for m in view.tie_metrics %}<td class="num">{{ r["values"].get(m)|fmt }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% if view.tie_breaks %}<ul id="tie-breaks">{% for b in view.tie_breaks %}<li>{{ b.rule }} ({{ b.metric }}): {% if b.job is not none %}<b>job {{ b.job }} {{ b.name }}</b>{% else %}no member has the value{% endif %}</li>{% endfor %}</ul>{% endif %}
{% else %}<p>Not available{% if view.top_error %}: {{ view.top_error }}{% endif %}.</p>{% endif %}
</section>
<section id="jobs"><h2>Jobs (click a header to sort)</h2>
<table id="job-table"><thead><tr><th class="sortable num">job</th><th class="sortable">run</th><th class="sortable">status</th><th class="sortable">chunker</th><th class="sortable num">size</th><th class="sortable num">overlap</th><th class="sortable">retriever</th>{% for c in columns %}<th class="sortable num">{{ c }}</th>{% endfor %}<th>report</th></tr></thead><tbody>
{% for j in view.jobs %}<tr data-run="{{ j.run_id }}"{% if best and j.run_id == best.run_id %} class="best"{% endif %}><td class="num">{{ j.job }}</td><td>{{ j.name }}{% if j.run_id in front %} <span class="reason hit" title="on the Pareto front of recall against context tokens">Pareto</span>{% endif %}</td><td>{{ j.status }}</td><td>{{ j.chunker or '' }}</td><td class="num" data-sort="{{ j.chunk_size or '' }}">{{ j.chunk_size or '' }}</td><td class="num">{{ j.chunk_overlap or '' }}</td><td>{{ j.retriever or '' }}</td>
{% for c in columns %}<td class="num" data-metric="{{ c }}" data-value="{{ j.metrics.get(c)|full }}" data-sort="{{ j.metrics.get(c)|full }}">{{ j.metrics.get(c)|fmt }}</td>{% endfor %}
<td>{% if j.link %}<a href="{{ j.link }}">report</a>{% endif %}</td></tr>
{% endfor %}</tbody></table>
</section>
<section id="charts"><h2>Charts</h2><div class="charts">
{% for caption, svg in figures %}<figure><figcaption>{{ caption }}</figcaption>{{ svg|safe }}</figure>{% endfor %}
</div></section>
<section id="comparison"><h2>Best against baseline, query by query</h2>
{% if best and baseline and view.comparison %}
<p id="baseline-rule">Baseline: {{ view.baseline_rule }}.</p>
<p>Best <b>{{ best.name }}</b> against baseline <b>{{ baseline.name }}</b> on the same {{ view.comparison[0].n }} queries: mean difference (best − baseline), its {{ ((1 - view.alpha) * 100)|round|int }}% bootstrap CI, the paired sign-flip p-value (Holm-adjusted), and the queries where best is higher / equal / lower.</p>
<table id="comparison-table"><thead><tr><th>metric</th><th class="num">best</th><th class="num">diff</th><th class="num">CI</th><th class="num">p</th><th class="num">p (Holm)</th><th class="num">W/T/L</th><th></th></tr></thead><tbody>
{% for r in view.comparison %}<tr data-metric="{{ r.metric }}"><td>{{ r.metric }}</td><td class="num">{{ r.mean|fmt }}</td><td class="num" data-value="{{ r.diff|full }}">{{ r.diff|fmt }}</td><td class="num">[{{ r.ci_low|fmt }}, {{ r.ci_high|fmt }}]</td><td class="num">{{ r.p|fmt(3) }}</td><td class="num">{{ r.p_holm|fmt(3) }}</td><td class="num">{{ r.W }}/{{ r.T }}/{{ r.L }}</td><td>{{ r.sig }}</td></tr>
{% endfor %}</tbody></table>
{% else %}<p>Not available: the sweep needs two finished jobs with comparable per-query tables (same dataset and queries).</p>{% endif %}
</section>
<section id="best-report"><h2>The best job: where it cut the documents, why its misses missed</h2>
{% if best and best_report %}<p class="muted">The report of <b>{{ best.name }}</b>, inside this page: its documents with the chunk boundaries and the evidence highlighted, and every query with what it retrieved and why it missed.</p>
<iframe class="embedded-report" title="report of {{ best.name }}" srcdoc="{{ best_report }}"></iframe>
{% elif best %}<p>The best job logged no report (<code>tracking.report=false</code>); <code>harness report {{ best.run_id }}</code> writes one.</p>
{% else %}<p>No finished job.</p>{% endif %}
</section>
</main>
{% endblock %}
"""

#: Template name -> source, for ``jinja2.DictLoader``.
TEMPLATES = {"base.html": BASE, "cards.html": CARDS, "run.html": RUN, "pair.html": PAIR, "sweep.html": SWEEP}
