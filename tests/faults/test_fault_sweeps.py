"""Fault class: a sweep that is not what it says, and an override that needs quoting.

A multirun's job list is planned once (:func:`harness.tracking.callbacks.plan_sweep`) from
the same overrides Hydra's basic sweeper reads; the plan refuses a key typed twice, a value
listed twice in one sweep and a sweep with no values, and everything the sweep reports (the
``job i/N`` lines, the parent run's name, ``sweep.jobs``, ``sweep.grid``) comes from it. The
property tests build override lists together with the jobs they mean (worked out here from
the generated values and the ``conf/`` folders, not by Hydra) and check the plan against
that and against Hydra's own sweeper. An override Hydra's grammar cannot read unquoted (a
value with ``=``, ``#`` or a regex) is refused with one line that shows a quoted form; that
form, split as a shell splits it, parses back to the value."""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import shlex
import sqlite3
import subprocess
import sys

import mlflow
import pytest
from conftest import _SESSION_CACHE, PROJECT_ROOT, fresh_store
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.experiment.errors import hydra_error_line
from harness.tracking.callbacks import SweepPlanError, plan_sweep
from harness.tracking.tracker import SWEEP_TAG

CONF = PROJECT_ROOT / "conf"
GROUP_OPTIONS = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in ("retriever", "chunker")}
BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


@pytest.fixture(scope="module")
def loader():
    """Hydra's config loader over ``conf/`` (what the sweeper uses to expand ``glob(...)``)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return GlobalHydra.instance().config_loader()


def _hydra_jobs(args: list[str], loader) -> list[list[str]]:
    """The jobs Hydra's basic sweeper makes of ``args`` (its own parser and ``split_arguments``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create(config_loader=loader).parse_overrides(args)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _values_of(job: list[str]) -> dict:
    """``{key: parsed value}`` of one job's overrides (read back with Hydra's parser)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return {o.get_key_element(): o.value() for o in OverridesParser.create().parse_overrides(job)}


# ------------------------------------------------------------------ generated override lists

_INT_KEYS = ("chunker.chunk_size", "chunker.chunk_overlap", "stats.seed")
_TEXT = st.text(alphabet="abz09 =#^.*+?|,:-_/", min_size=1, max_size=6).filter(lambda s: s.strip() == s)


@st.composite
def _override(draw, key: str | None = None):
    """``(override text, key, the values it means, whether it is a sweep)``: values worked out here, by hand."""
    key = key or draw(st.sampled_from((*_INT_KEYS, "tracking.run_name", "retriever", "chunker")))
    if key in GROUP_OPTIONS:
        options = GROUP_OPTIONS[key]
        form = draw(st.sampled_from(("one", "list", "choice", "glob")))
        if form == "glob":
            pattern = draw(st.sampled_from(("*", "b*", "*e*", "f*", "zz*")))
            return f"{key}=glob({pattern})", key, sorted(fnmatch.filter(options, pattern)), True
        values = draw(st.lists(st.sampled_from(options), min_size=1, max_size=3))
    elif key == "tracking.run_name":  # quoted strings: commas and '=' inside quotes are text
        form = draw(st.sampled_from(("one", "list", "choice")))
        values = draw(st.lists(_TEXT, min_size=1, max_size=3))
        rendered = [f"'{v}'" for v in values]
        text = rendered[0] if form == "one" else ",".join(rendered) if form == "list" else f"choice({','.join(rendered)})"
        return f"{key}={text}", key, values[:1] if form == "one" else values, form == "choice" or (form == "list" and len(values) > 1)
    else:
        form = draw(st.sampled_from(("one", "list", "choice", "range")))
        if form == "range":
            a, b, step = draw(st.integers(0, 40)), draw(st.integers(0, 40)), draw(st.integers(1, 15))
            return f"{key}=range({a},{b},{step})", key, list(range(a, b, step)), True
        values = draw(st.lists(st.integers(0, 600), min_size=1, max_size=3))
    values = values[:1] if form == "one" else values
    text = str(values[0]) if form == "one" else ",".join(map(str, values)) if form == "list" else f"choice({','.join(map(str, values))})"
    return f"{key}={text}", key, values, form == "choice" or (form == "list" and len(values) > 1)


@st.composite
def _sweep(draw):
    """``(command-line overrides, sweeper params, [(key, values)] meant)``; keys may repeat."""
    task = draw(st.lists(_override(), min_size=1, max_size=4))
    param_keys = draw(st.lists(st.sampled_from(("chunker.chunk_size", "retriever", "stats.seed")), max_size=2, unique=True))
    params = [draw(_override(key)) for key in param_keys]
    return task, params


def _expected(task, params):
    """What the sweep must do, worked out from the generated values: ``("refuse", key)``
    or ``("run", [job as {key: value}, ...])``. Sweeper params come first; a command-line
    override of a param's key replaces the param's values (Hydra's documented precedence)."""
    seen = set()
    for _, key, _, _ in task:
        if key in seen:
            return "refuse", key
        seen.add(key)
    axes: dict[str, list] = {}
    for _, key, values, _ in [*params, *task]:
        axes[key] = values
    for key, values in axes.items():
        if not values or len(set(map(repr, values))) != len(values):
            return "refuse", key
    for text, key, values, _ in [*params, *task]:
        # Hydra's choice(...) hands its jobs each value without its quotes (special characters escaped): a string that does not
        # read back as itself unquoted ('0' becomes the int 0; '^' does not parse) cannot be swept so
        if key in axes and "=choice(" in text and not all(_reads_back_unquoted(v) for v in values if isinstance(v, str)):
            return "refuse", key
    jobs = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    swept = {key: is_sweep for _, key, _, is_sweep in [*params, *task]}
    return "run", (jobs, [key for key in axes if swept[key]])


def _reads_back_unquoted(value: str) -> bool:
    """True when ``key=<value>`` without quotes (Hydra's escaping of special characters, as its
    sweeper writes a job's value) parses with Hydra's grammar to the same string."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import escape_special_characters

    try:
        back = OverridesParser.create().parse_overrides([f"k={escape_special_characters(value)}"])[0].value()
    except Exception:  # noqa: BLE001 - Hydra's grammar refuses the text
        return False
    return isinstance(back, str) and back == value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_sweep())
def test_plan_is_the_grid_typed_or_a_refusal_naming_the_key(case, loader):
    task, params = case
    args = [text for text, *_ in task]
    param_map = {text.split("=", 1)[0]: text.split("=", 1)[1] for text, *_ in params}
    verdict, expected = _expected(task, params)
    if verdict == "refuse":
        with pytest.raises(SweepPlanError) as info:
            plan_sweep(args, param_map, BASIC, loader)
        line = str(info.value)
        assert "\n" not in line and expected in line
        return
    jobs, swept = expected
    plan = plan_sweep(args, param_map, BASIC, loader)
    assert plan.n_jobs == len(jobs) == len(plan.jobs)
    assert [_values_of(list(job)) for job in plan.jobs] == jobs
    # the same overrides through Hydra's own sweeper give the same jobs, in the same order
    assert [list(job) for job in plan.jobs] == _hydra_jobs([f"{k}={v}" for k, v in param_map.items()] + args, loader)
    assert [key for key, _ in plan.swept] == swept


def test_the_issue_example_is_refused_naming_the_repeated_key():
    args = ["retriever=bm25", "chunker.chunk_size=128,256", "chunker.chunk_overlap=0,16", "chunker.chunk_size=512"]
    with pytest.raises(SweepPlanError) as info:
        plan_sweep(args, None, BASIC)
    line = str(info.value)
    assert line.startswith("chunker.chunk_size: given twice")
    assert "chunker.chunk_size=128,256" in line and "chunker.chunk_size=512" in line and "one sweep" in line
    # without the repetition: the 2 x 2 grid typed, in Hydra's order (the last key varies fastest)
    plan = plan_sweep(args[:3], None, BASIC)
    assert [list(j) for j in plan.jobs] == [
        ["retriever=bm25", "chunker.chunk_size=128", "chunker.chunk_overlap=0"],
        ["retriever=bm25", "chunker.chunk_size=128", "chunker.chunk_overlap=16"],
        ["retriever=bm25", "chunker.chunk_size=256", "chunker.chunk_overlap=0"],
        ["retriever=bm25", "chunker.chunk_size=256", "chunker.chunk_overlap=16"],
    ]
    assert plan.swept == (("chunker.chunk_size", ("128", "256")), ("chunker.chunk_overlap", ("0", "16")))


def test_duplicate_value_empty_range_and_interval_are_refused():
    with pytest.raises(SweepPlanError, match=r"^chunker\.chunk_size=128,256,128: 128 is listed twice"):
        plan_sweep(["chunker.chunk_size=128,256,128"], None, BASIC)
    with pytest.raises(SweepPlanError, match=r"^chunker=fixed,'fixed': fixed is listed twice"):
        plan_sweep(["chunker=fixed,'fixed'"], None, BASIC)  # the same option, once quoted
    assert plan_sweep(["chunker.chunk_size=128,'128'"], None, BASIC).n_jobs == 2  # an int and a string: not the same value
    with pytest.raises(SweepPlanError, match=r"^chunker\.chunk_size=range\(5,5\): the sweep has no values"):
        plan_sweep(["chunker.chunk_size=range(5,5)"], None, BASIC)
    with pytest.raises(SweepPlanError, match=r"^chunker\.threshold=interval\(0,1\): .*choice\(\.\.\.\) or range\(\.\.\.\)"):
        plan_sweep(["chunker.threshold=interval(0,1)"], None, BASIC)
    # another sweeper decides its own jobs: the count is unknown, a repeated key still refused
    other = plan_sweep(["chunker.threshold=interval(0,1)"], None, "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")
    assert other.n_jobs is None and other.jobs is None
    with pytest.raises(SweepPlanError, match="given twice"):
        plan_sweep(["a=1", "a=2"], None, "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")


# ------------------------------------------------------------------ through the command line


def _run(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "harness.run", *args, f"tracking.uri={store}", f"cache.dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    return subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)


def _run_count(db) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:  # no tables: nothing was ever logged
            return 0


@pytest.mark.slow
def test_repeated_key_sweep_exits_2_before_any_run(tmp_path):
    proc = _run(["-m", "retriever=bm25", "chunker.chunk_size=128,256", "chunker.chunk_overlap=0,16", "chunker.chunk_size=512"], tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness run: chunker.chunk_size: given twice"), proc.stderr
    assert "job 1/" not in proc.stdout and "sweep parent run" not in proc.stdout
    assert _run_count(tmp_path / "mlflow.db") == 0
    assert not (tmp_path / "multirun" / "0").exists()  # no job folder


@pytest.mark.slow
def test_unquoted_equals_sign_exits_2_with_a_hint_that_works(tmp_path):
    proc = _run(["tracking.run_name=a=b"], tmp_path)
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("harness run: tracking.run_name=a=b: ")
    assert _hint(line) == """'tracking.run_name="a=b"'"""
    assert _run_count(tmp_path / "mlflow.db") == 0


@pytest.mark.slow
def test_parent_records_the_grid_that_ran(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [
        "-m",
        "retriever=glob(bm*)",
        "chunker=fixed",
        "chunker.chunk_size=100",
        "stats.bootstrap=0",
        "tracking.report=false",
        "embedding.show_progress=false",
    ]
    cmd = [sys.executable, "-m", "harness.run", *args, f"tracking.uri={uri}", f"cache.dir={_SESSION_CACHE}", f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # glob(bm*) over conf/retriever matches one file (bm25.yaml): one job, and its line says so
    assert GROUP_OPTIONS["retriever"].count("bm25") == 1 and fnmatch.filter(GROUP_OPTIONS["retriever"], "bm*") == ["bm25"]
    assert "job 1/1: fixed-100-0-bm25" in proc.stdout
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("kestrel_kb")
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(SWEEP_TAG) == "parent"]
    assert sorted(r.info.run_name for r in runs if r.data.tags.get(SWEEP_TAG) != "parent") == ["fixed-100-0-bm25"]
    # the fixed overrides after the swept one; tracking.*, embedding.show_progress, cache.dir and hydra.* left out
    assert parent.info.run_name == "sweep retriever=glob(bm*) | chunker=fixed chunker.chunk_size=100 stats.bootstrap=0"
    assert parent.data.tags["sweep.jobs"] == "1" and parent.data.tags["sweep.grid"] == "retriever=bm25"
    local = client.download_artifacts(parent.info.run_id, "sweep_plan.json", str(tmp_path))
    with open(local, encoding="utf-8") as fh:
        plan = json.load(fh)
    assert plan["n_jobs"] == 1 and plan["swept"] == {"retriever": ["bm25"]}
    (job,) = [dict(o.split("=", 1) for o in j) for j in plan["jobs"]]
    assert (job["retriever"], job["chunker"], job["chunker.chunk_size"]) == ("bm25", "fixed", "100")


# ------------------------------------------------------------------ overrides that need quoting


def _hint(line: str) -> str:
    """The form to type, from the end of a refusal line."""
    marker = "; quote it for Hydra and the shell: "
    assert marker in line, line
    return line.rsplit(marker, 1)[1]


def _parse_error(override: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        OverridesParser.create().parse_overrides([override])
    except OverrideParseException as exc:
        return exc
    return None


@settings(max_examples=80, deadline=None)
@given(value=st.text(alphabet="ab=#^$.*+?|()[]\\d,:'\" -", min_size=1, max_size=12))
def test_quoting_hint_names_the_override_and_parses_back(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assume(value.strip() == value and "${" not in value)
    override = f"tracking.run_name={value}"
    exc = _parse_error(override)
    assume(exc is not None)
    line = hydra_error_line(exc)
    assert "\n" not in line and line.startswith(f"{override}: ")
    (arg,) = shlex.split(_hint(line))  # what the program receives once the shell has read the hint
    (parsed,) = OverridesParser.create().parse_overrides([arg])
    assert parsed.get_key_element() == "tracking.run_name" and parsed.value() == value


def test_hint_for_a_regex_and_a_hash():
    for value in (r"^\d+\.$", "x#y", "(a|b)"):
        line = hydra_error_line(_parse_error(f"chunker.timestamp_regex={value}"))
        assert line.startswith(f"chunker.timestamp_regex={value}: ") and "quote" in line
        (arg,) = shlex.split(_hint(line))
        assert arg == f'chunker.timestamp_regex="{value}"'


# A single run (no -m): Hydra applies overrides in order, so a key typed twice silently kept
# its last value; the run now warns in one line naming the key and both overrides (scripts
# append overrides to a base list, so it is not refused), and the last value is the one composed.

SINGLE_KEYS = {"chunker.chunk_size": st.integers(16, 999), "chunker.chunk_overlap": st.integers(0, 15), "stats.seed": st.integers(0, 99)}


@st.composite
def single_run_overrides(draw):
    keys = draw(st.lists(st.sampled_from(sorted(SINGLE_KEYS)), min_size=1, max_size=5))
    return [(k, draw(SINGLE_KEYS[k])) for k in keys]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=single_run_overrides())
def test_single_run_names_a_repeated_key_and_composes_the_last_value(pairs):
    from harness.experiment.config import compose
    from harness.experiment.errors import repeated_override_error

    args = [f"{k}={v}" for k, v in pairs]
    keys = [k for k, _ in pairs]
    repeated = [k for i, k in enumerate(keys) if k in keys[:i]]
    line = repeated_override_error(args)
    if repeated:
        assert line is not None and line.startswith(f"{repeated[0]}: given twice (") and "the last one takes effect" in line
    else:
        assert line is None
    cfg = compose(args)
    last = dict(pairs)  # the last value of each key, as the user's final word
    for k, v in last.items():
        node, _, leaf = k.rpartition(".")
        assert cfg[node][leaf] == v


def test_single_run_repeated_key_warns_naming_both_overrides(tmp_path, capsys, monkeypatch):
    import harness.cli.run as cli_run

    monkeypatch.setattr(cli_run, "main", lambda: None)  # the warning comes before Hydra: no run is needed to see it
    args = ["chunker.chunk_size=128", "retriever=bm25", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "chunker.chunk_size=512"]
    assert cli_run.run_command(args) == 0
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert line.startswith("harness run: warning: chunker.chunk_size: given twice (chunker.chunk_size=128 and chunker.chunk_size=512); the last one")


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=6, unique=True))
def test_a_shuffled_sweep_is_planned_with_its_values_never_refused(values):
    """``shuffle(...)`` draws a new order on every pass over the values: the plan holds each
    value once whatever the order (formerly two passes were compared position by position and
    a valid sweep was refused at random)."""
    line = "chunker.chunk_size=shuffle(" + ",".join(map(str, values)) + ")"
    for _ in range(5):  # several draws: a refusal would show up in some order
        plan = plan_sweep(["retriever=bm25", line], None, BASIC)
        assert sorted(int(job[1].split("=", 1)[1]) for job in plan.jobs) == sorted(values)
        assert plan.n_jobs == len(values)
