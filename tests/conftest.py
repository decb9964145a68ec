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
pytest as usual).

The user's home: the first test process (the one the command started) makes one suite
folder that it, its workers and every subprocess share through the environment (see
:data:`HOME_VARIABLES`): ``HOME`` is an empty folder in it, and every cache and
configuration folder a library would put under ``~`` (Hugging Face, torch, matplotlib,
MLflow's telemetry file, numba, tiktoken, ir_datasets, IPython, Jupyter, Hypothesis'
example database, chromium's profile) is a folder beside it. So the suite neither reads
nor writes the user's home and depends on no cache a former run left there; MLflow's and
Ray's usage telemetry is off. The suite folder is removed at exit.

The write guard: every test process, and every Python subprocess that inherits the
environment, records each write it makes under the project folder and each write or read
under the user's real home (:mod:`harness_test_writes`, an audit hook; bytecode caches
and ``.pytest_cache`` excepted). At session end the run fails if there is any record, and
the summary ("writes into the project folder or your home") names each path and the test
that wrote it. Writes by other programs (an experiment of yours running in the clone at
the same time) are not the suite's and are not reported. A non-Python program the suite
starts is not seen by the hook; anything it puts in the suite's empty ``HOME`` is listed as
a note (a redirect this file lacks).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import sys
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
_STARTUP = Path(__file__).resolve().parent / "_startup"
if str(_STARTUP) not in sys.path:
    sys.path.insert(0, str(_STARTUP))
import harness_test_writes  # noqa: E402

#: The folder shared by this test run's processes (made by the first, removed by it at exit).
_SUITE_ENV = "HARNESS_TESTS_SUITE_ROOT"
if os.environ.get(_SUITE_ENV) and Path(os.environ[_SUITE_ENV]).is_dir():
    SUITE_ROOT = Path(os.environ[_SUITE_ENV])
else:
    SUITE_ROOT = Path(tempfile.mkdtemp(prefix="harness-suite-"))
    os.environ[_SUITE_ENV] = str(SUITE_ROOT)
    # the user's home as this run found it (a worker or subprocess inherits the first process's value)
    os.environ[harness_test_writes.ENV_HOME] = os.path.abspath(os.path.expanduser("~"))
    os.environ[harness_test_writes.ENV_LOG] = str(SUITE_ROOT / "writes")
    os.environ[harness_test_writes.ENV_PROJECT] = str(PROJECT_ROOT)
    os.environ[harness_test_writes.ENV_READABLE] = str(PROJECT_ROOT.parent / "shared")  # CHROMA_PATH's datasets
    # Ray 2.60 starts a local cluster in token mode and, without a token, writes one to ~/.ray/auth_token
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    (SUITE_ROOT / "writes").mkdir()
    (SUITE_ROOT / "home").mkdir()
    atexit.register(shutil.rmtree, SUITE_ROOT, ignore_errors=True)
#: The user's home as the test run found it; nothing in the suite reads or writes under it.
REAL_HOME = Path(os.environ[harness_test_writes.ENV_HOME])
#: The empty folder ``HOME`` points at during the suite.
SUITE_HOME = SUITE_ROOT / "home"

#: Variables that decide where a library keeps files under ``~``, each with its folder in
#: the suite folder; names that only switch usage telemetry off have a plain value.
HOME_VARIABLES = {
    "HOME": str(SUITE_HOME),
    "XDG_CACHE_HOME": str(SUITE_ROOT / "cache"),  # matplotlib's font list, chromium's cache, ...
    "XDG_CONFIG_HOME": str(SUITE_ROOT / "config"),  # MLflow's telemetry.json, chromium's profile, ...
    "XDG_DATA_HOME": str(SUITE_ROOT / "data"),  # Jupyter's kernels and runtime files, ...
    "XDG_STATE_HOME": str(SUITE_ROOT / "state"),
    "HF_HOME": str(SUITE_ROOT / "cache" / "huggingface"),  # the Hugging Face hub cache (sentence-transformers, model2vec)
    "TORCH_HOME": str(SUITE_ROOT / "cache" / "torch"),
    "MPLCONFIGDIR": str(SUITE_ROOT / "config" / "matplotlib"),
    "NUMBA_CACHE_DIR": str(SUITE_ROOT / "cache" / "numba"),
    "TIKTOKEN_CACHE_DIR": str(SUITE_ROOT / "cache" / "tiktoken"),  # else a shared, warm /tmp/data-gym-cache
    "IR_DATASETS_HOME": str(SUITE_ROOT / "data" / "ir_datasets"),  # ir_measures loads ir_datasets (~/.ir_datasets)
    "IPYTHONDIR": str(SUITE_ROOT / "config" / "ipython"),  # the notebook test's kernel (~/.ipython)
    "JUPYTER_CONFIG_DIR": str(SUITE_ROOT / "config" / "jupyter"),  # ~/.jupyter
    "RAY_TMPDIR": str(SUITE_ROOT / "ray"),  # a local Ray cluster's session files (else a shared /tmp/ray)
    "HYPOTHESIS_STORAGE_DIRECTORY": str(SUITE_ROOT / "hypothesis"),  # else .hypothesis/ in the starting folder
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
os.environ.update(HOME_VARIABLES)
# the suite's own Python subprocesses record their writes too (tests/_startup/sitecustomize.py)
_pythonpath = os.environ.get("PYTHONPATH", "")
if str(_STARTUP) not in _pythonpath.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_STARTUP), _pythonpath) if p)
harness_test_writes.install_from_env()

#: This process's temporary folder for everything the suite writes outside ``tmp_path``.
SESSION_ROOT = Path(tempfile.mkdtemp(prefix="harness-tests-"))
(SESSION_ROOT / "mlruns").mkdir()
(SESSION_ROOT / "cwd").mkdir()
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{SESSION_ROOT / 'mlruns' / 'mlflow.db'}"
atexit.register(shutil.rmtree, SESSION_ROOT, ignore_errors=True)

import pytest  # noqa: E402
from hypothesis import HealthCheck  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

# Hypothesis' own speed checks measure the machine, not the test: on two shared cores, or with the
# suite's empty example and constants cache (HYPOTHESIS_STORAGE_DIRECTORY above; its first draw in
# each process parses the project's sources), input generation is slow by chance. Every other
# health check stays on; a test's own @settings(suppress_health_check=...) replaces this list.
# Property tests draw new inputs on every run on a developer's machine (to keep finding cases);
# CI (HYPOTHESIS_PROFILE=ci in .ci/run) draws a fixed sequence, so a green main stays green.
hypothesis_settings.register_profile("harness-suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.register_profile("ci", parent=hypothesis_settings.get_profile("harness-suite"), derandomize=True, print_blob=True)
hypothesis_settings.load_profile("ci" if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else "harness-suite")

_RECORDS = pytest.StashKey[list]()
_HOME_NOTE = pytest.StashKey[list]()


def _is_worker(config) -> bool:
    """True in a pytest-xdist worker (the controller does the session-end check)."""
    return hasattr(config, "workerinput")


@pytest.fixture(scope="session", autouse=True)
def _work_in_the_session_folder():
    """Tests run with the session folder's ``cwd/`` as working directory (set after
    collection, which resolves the command line's paths against the starting folder)."""
    before = os.getcwd()
    os.chdir(SESSION_ROOT / "cwd")
    yield
    os.chdir(before)


def suite_records(log: Path) -> list[str]:
    """The write guard's findings in the record folder ``log``, one line each
    (``wrote <path> (test)``, ``read <path> (test)``), each path once, sorted."""
    seen: dict[str, str] = {}
    for kind, path, test, _pid in harness_test_writes.read_records(str(log)):
        verb = "read" if kind == "home-read" else "wrote"
        seen.setdefault(f"{verb} {path}", test.rsplit(" (", 1)[0] or "collection or session setup")
    return [f"{key}  ({test})" for key, test in sorted(seen.items())]


def pytest_sessionfinish(session, exitstatus):
    if _is_worker(session.config):
        return
    found = suite_records(Path(os.environ[harness_test_writes.ENV_LOG]))
    if found:
        session.config.stash[_RECORDS] = found
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if SUITE_HOME.is_dir():
        session.config.stash[_HOME_NOTE] = sorted(str(p.relative_to(SUITE_HOME)) for p in SUITE_HOME.iterdir())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    found = config.stash.get(_RECORDS, None)
    if found:
        terminalreporter.section("writes into the project folder or your home", sep="=", red=True, bold=True)
        terminalreporter.line(
            f"the suite must write only into temporary folders and never open your home, but its processes touched "
            f"{len(found)} path(s) under {PROJECT_ROOT} or {REAL_HOME}:"
        )
        for line in found[:50]:
            terminalreporter.line(f"  {line}")
        if len(found) > 50:
            terminalreporter.line(f"  ... and {len(found) - 50} more")
    note = config.stash.get(_HOME_NOTE, None)
    if note:
        terminalreporter.section("the suite's empty HOME", sep="-", yellow=True)
        terminalreporter.line(
            f"something the suite ran wrote {', '.join(note[:10])} into {SUITE_HOME} (HOME during the suite): "
            "a folder variable missing from tests/conftest.py HOME_VARIABLES"
        )


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


def windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Character windows of ``size`` stepping ``size - overlap`` over ``n`` characters, the
    last one ending at ``n`` (worked out independently of the chunkers)."""
    out, start = [], 0
    while True:
        out.append((start, min(start + size, n)))
        if start + size >= n:
            return out
        start += size - overlap
