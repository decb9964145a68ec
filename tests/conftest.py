"""Shared fixtures, and the rule that the suite writes only into temporary folders.

Everything is real: the packaged MiniLM model, FAISS, rank-bm25, and MLflow SQLite stores
under temporary folders. Nothing touches the network.

Writes: each test process (the main one, or each ``-n`` worker) gets one session folder
under the system temp dir. At import, before any project module is loaded,
``MLFLOW_TRACKING_URI`` points at a store inside it (so a run that names no ``tracking.uri``,
here or in a subprocess that inherits the environment, never logs to the project's
``mlruns/`` or to a developer's server), and from the first test on the working directory
is a folder inside it (so anything written relative to the working directory, such as
MLflow's ``./mlruns`` artifact default, lands there). :func:`compose` sends the on-disk cache
there too. The folder is removed when the process exits (``tmp_path`` folders are kept by
pytest as usual). At session end the run fails if the project's ``mlruns/``, ``.cache/``,
``outputs/`` or ``multirun/`` differ from the snapshot taken at session start, and the
summary lists what appeared, changed or went away. Do not run experiments from the same
project folder while the suite runs: their writes would be reported too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# expected values (recorded hashes, keys, vectors compared with a plain fp32 encode) are
# fp32's: embedding.precision=auto means fp32 here on every machine, subprocesses included;
# tests of auto's own choice (tests/embeddings/test_precision.py) unset it
os.environ["HARNESS_AUTO_PRECISION"] = "fp32"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: This process's temporary folder for everything the suite writes outside ``tmp_path``.
SESSION_ROOT = Path(tempfile.mkdtemp(prefix="harness-tests-"))
(SESSION_ROOT / "mlruns").mkdir()
(SESSION_ROOT / "cwd").mkdir()
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{SESSION_ROOT / 'mlruns' / 'mlflow.db'}"
atexit.register(shutil.rmtree, SESSION_ROOT, ignore_errors=True)

import pytest  # noqa: E402
from hypothesis import settings as _hypothesis_settings  # noqa: E402

# Property tests draw new inputs on every run on a developer's machine (to keep finding
# cases); CI (HYPOTHESIS_PROFILE=ci in .ci/run) draws a fixed sequence, so a green main stays green.
_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: Project folders the suite must leave as they were (created, changed or removed = failure).
GUARDED = ("mlruns", ".cache", "outputs", "multirun")
_CHANGED = pytest.StashKey[list]()
_SNAPSHOT = pytest.StashKey[dict]()


def _snapshot() -> dict[str, tuple]:
    """Every path under the guarded folders -> ("dir",) or (size in bytes, mtime in ns)."""
    state: dict[str, tuple] = {}
    for name in GUARDED:
        top = PROJECT_ROOT / name
        if not top.exists():
            continue
        state[name] = ("dir",)
        for dirpath, dirnames, filenames in os.walk(top):
            for entry in dirnames:
                state[os.path.relpath(os.path.join(dirpath, entry), PROJECT_ROOT)] = ("dir",)
            for entry in filenames:
                path = os.path.join(dirpath, entry)
                try:
                    st = os.lstat(path)
                except OSError:  # removed while walking
                    continue
                state[os.path.relpath(path, PROJECT_ROOT)] = (st.st_size, st.st_mtime_ns)
    return state


def _is_worker(config) -> bool:
    """True in a pytest-xdist worker (the controller does the session-end check)."""
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if not _is_worker(session.config):
        session.config.stash[_SNAPSHOT] = _snapshot()


@pytest.fixture(scope="session", autouse=True)
def _work_in_the_session_folder():
    """Tests run with the session folder's ``cwd/`` as working directory (set after
    collection, which resolves the command line's paths against the starting folder)."""
    before = os.getcwd()
    os.chdir(SESSION_ROOT / "cwd")
    yield
    os.chdir(before)


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_SNAPSHOT, None)
    if before is None:
        return
    after = _snapshot()
    changed = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    changed += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    changed += [f"changed {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    if changed:
        session.config.stash[_CHANGED] = changed
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    changed = config.stash.get(_CHANGED, None)
    if not changed:
        return
    terminalreporter.section("writes into the project folder", sep="=", red=True, bold=True)
    terminalreporter.line(
        f"the suite must write only into temporary folders, but {len(changed)} path(s) under "
        f"{', '.join(GUARDED)} in {PROJECT_ROOT} differ from the session start:"
    )
    for line in changed[:50]:
        terminalreporter.line(f"  {line}")
    if len(changed) > 50:
        terminalreporter.line(f"  ... and {len(changed) - 50} more")


KESTREL_PATH = PROJECT_ROOT / "datasets" / "kestrel_kb"
CHROMA_PATH = (PROJECT_ROOT / ".." / "shared" / "datasets" / "chroma_general").resolve()


@pytest.fixture(scope="session")
def kestrel():
    from harness.datasets.native import load_native

    return load_native(KESTREL_PATH)


@pytest.fixture(scope="session")
def chroma():
    from harness.datasets.chroma import load_chroma_general

    if not (CHROMA_PATH / "questions.csv").is_file():
        pytest.skip(f"shared chroma_general copy not found at {CHROMA_PATH}")
    return load_chroma_general(CHROMA_PATH)


#: Chromium flags that work headless on these machines (no sandbox as root, no GPU, no
#: background traffic to Google services).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def encoder():
    from harness.embeddings.model import Encoder

    return Encoder(show_progress=False)


_TEMPLATE_STORE = SESSION_ROOT / "template" / "mlflow.db"


def fresh_store(path: Path) -> str:
    """A new, empty MLflow SQLite store at ``path`` (a ``.db`` file that must not exist yet).

    Creating a store runs MLflow's schema migrations (seconds per store); the first call of
    a session creates one empty, migrated store and every call copies that file, so each
    test still gets its own real, untouched store. Returns its ``sqlite:///`` URI.
    """
    import shutil

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"fresh_store: {path} exists; expected a path for a new store")
    if not _TEMPLATE_STORE.exists():
        import mlflow

        _TEMPLATE_STORE.parent.mkdir(parents=True, exist_ok=True)
        building = _TEMPLATE_STORE.with_suffix(".building")
        mlflow.MlflowClient(f"sqlite:///{building}").search_experiments()  # creates the tables
        shutil.copyfile(building, _TEMPLATE_STORE)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATE_STORE, path)
    return f"sqlite:///{path}"


@pytest.fixture()
def tracking_uri(tmp_path):
    """URI of a new, empty MLflow SQLite store in this test's ``tmp_path`` (see :func:`fresh_store`)."""
    return fresh_store(tmp_path / "mlflow.db")


_SESSION_CACHE = str(SESSION_ROOT / "cache")

#: Embedding settings added after runs were first recorded, with the value that embeds as
#: before they existed (``auto`` is fp32 in this suite): the pre-change hash recipes leave
#: them out of the config they hash.
ADDED_EMBEDDING_SETTINGS = (
    ("query_prompt", ""),
    ("document_prompt", ""),
    ("prompts", "none"),
    ("max_seq_length", None),
    ("trust_remote_code", False),
    ("precision", "auto"),
    ("distributed", None),
    ("ray_address", None),
    ("ray_workers", None),
    ("ray_threads", None),
)

#: Settings of ``retriever=faiss`` added after runs were first recorded (the approximate
#: indexes), with the value that searches as before they existed: the pre-change hash
#: recipes leave them out of the config they hash.
ADDED_FAISS_SETTINGS = (
    ("index", "flat"),
    ("hnsw_m", 32),
    ("hnsw_ef_construction", 200),
    ("hnsw_ef_search", 128),
    ("hnsw_build_threads", 1),
    ("ivf_nlist", None),
    ("ivf_nprobe", 32),
    ("ivf_seed", 1234),
    ("ann_min_recall", 0.9),
    ("on_low_recall", "warn"),
)


def compose(overrides: list[str]):
    """Compose the project's Hydra config with overrides (no run directory, no chdir).

    Unless an override sets ``cache.*``, the on-disk cache goes to one temporary folder per
    test session, so tests never read or write the project's ``.cache``. Unless an override
    sets ``tracking.report``, runs log no HTML report (``tracking.report=false``: the report
    costs each of the suite's runs a rendering; tests/reporting sets it to true).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from harness.experiment.build import register_resolvers

    register_resolvers()
    if not any(o.startswith(("cache.", "cache=", "+cache")) for o in overrides):
        overrides = [*overrides, f"cache.dir={_SESSION_CACHE}"]
    if not any(o.startswith(("tracking.report=", "+tracking.report=", "++tracking.report=")) for o in overrides):
        overrides = [*overrides, "tracking.report=false"]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


@pytest.fixture(autouse=True)
def default_sigint():
    """Every test starts with Python's own Ctrl-C handler (KeyboardInterrupt) in the main
    thread, whatever an earlier test in this worker process left installed; the previous
    handler is put back afterwards."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def pytest_collection_modifyitems(config, items):
    """Longest first: the ``slow`` tests (end-to-end runs, subprocesses, servers) are
    scheduled before the quick ones, so with two workers (``-n 2 --dist worksteal``) the
    quick tests fill the gaps at the end instead of one long test running alone last.
    Order within each group is the collection order; tests do not depend on order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
