"""What the test suite's own processes write into the project folder or the user's home.

An audit hook (:func:`sys.addaudithook`, PEP 578) sees every file operation a Python
process asks for: ``open`` (with its mode and ``os.open`` flags), ``os.mkdir``,
``os.rename``/``os.replace``, ``os.remove``, ``os.rmdir``, ``os.symlink``, ``os.link``,
``os.truncate``, ``os.utime``, ``os.chmod``, ``shutil.rmtree`` and ``sqlite3.connect``
(MLflow's SQLite stores). :func:`install` adds one to this process; it records

* ``project <path>``: a write (create, change, rename, remove) under the project folder,
  except Python's bytecode (any ``__pycache__`` folder) and pytest's own ``.pytest_cache`` (with the
  ``pytest-cache-files-*`` folder it is first written in);
* ``home <path>``: a write under the user's home folder (the ``HOME`` the test run started
  with), bytecode excepted;
* ``home-read <path>``: a file opened for reading under that home, except the Python
  installation itself (``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix``), the
  project folder and the folders in :data:`ENV_READABLE` (the shared datasets beside it).

Each record is one line ``kind<TAB>absolute path<TAB>PYTEST_CURRENT_TEST<TAB>pid`` appended
to ``<log folder>/<pid>.log`` the moment it happens. Only the suite's processes record:
pytest and its workers (``tests/conftest.py`` calls :func:`install`) and the Python
subprocesses they start, which inherit ``PYTHONPATH`` with ``tests/_startup`` (its
``sitecustomize.py`` calls :func:`install_from_env`) and the three variables below. A
program of the user writing into the same folders at the same time is not seen, so it
cannot fail the suite. Not seen either: writes by non-Python programs, by C code given a
path no Python call named, and by subprocesses started with an environment that drops
``PYTHONPATH`` (the suite's other guard, an empty ``HOME``, covers those for the home).

Cost: one dictionary lookup per audit event; path work only for file events.
"""

from __future__ import annotations

import os
import sys

#: Folder the records go to (one file per process); set by the test session.
ENV_LOG = "HARNESS_TESTS_WRITE_LOG"
#: The project folder (absolute).
ENV_PROJECT = "HARNESS_TESTS_PROJECT"
#: The user's home folder as the test run found it (absolute), before the suite pointed
#: ``HOME`` at an empty temporary folder.
ENV_HOME = "HARNESS_TESTS_REAL_HOME"
#: Folders (``os.pathsep``-separated) the suite may read even inside the home: ``../shared``.
ENV_READABLE = "HARNESS_TESTS_READABLE"

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: audit event -> (indices of the paths it writes, index of the dir_fd each is relative to or None)
_PATH_EVENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.mkdir": ((0, 2),),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.rename": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.link": ((1, 3),),
    "os.truncate": ((0, None),),
    "os.utime": ((0, 3),),
    "os.chmod": ((0, 2),),
    "shutil.rmtree": ((0, 1),),
}
_EVENTS = frozenset({"open", "sqlite3.connect", *_PATH_EVENTS})

_installed: dict | None = None


def _absolute(path, dir_fd, cwd: str | None = None) -> str | None:
    """``path`` (str, bytes or path-like; relative to ``dir_fd`` or the working directory)
    as a normalised absolute path; None for a file descriptor or anything else."""
    if isinstance(path, int) or path is None:
        return None
    try:
        p = os.fsdecode(os.fspath(path))
    except TypeError:
        return None
    if not p:
        return None
    if not p.startswith("/"):
        if dir_fd is not None and isinstance(dir_fd, int):
            try:
                base = os.readlink(f"/proc/self/fd/{dir_fd}")
            except OSError:
                return None
        else:
            try:
                base = cwd if cwd is not None else os.getcwd()
            except OSError:
                return None
        p = os.path.join(base, p)
    return os.path.normpath(p)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def classify(
    event: str, args: tuple, *, project: str, home: str | None, skip: tuple[str, ...] = (), readable: tuple[str, ...] = (), cwd: str | None = None
) -> list[tuple[str, str]]:
    """The records one audit event makes: a list of ``(kind, absolute path)`` with kind
    ``"project"``, ``"home"`` or ``"home-read"`` (see the module docstring); empty for an
    event that touches neither folder. ``project`` and ``home`` are normalised absolute
    folders (``home`` None: not watched); paths under a folder in ``skip`` (the Python
    installation, the record folder) are never recorded, reads under a folder in ``readable``
    neither. ``cwd`` resolves relative paths
    (default: the working directory). A pure function of its arguments plus the file
    descriptors of ``dir_fd`` arguments; raises nothing for any event arguments."""
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if isinstance(mode, str):
            write = any(c in mode for c in "wax+")
        else:
            write = isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        targets = [(path, None, write)]
    elif event == "sqlite3.connect":
        database = args[0] if args else None
        if isinstance(database, (str, bytes)) or hasattr(database, "__fspath__"):
            database = os.fsdecode(os.fspath(database))
            if database.startswith("file:"):
                database, _, query = database[len("file:") :].partition("?")
                targets = [(database, None, "mode=ro" not in query)]
            else:
                targets = [(None if database == ":memory:" else database, None, True)]
        else:
            targets = []
    else:
        targets = []
        for index, fd_index in _PATH_EVENTS.get(event, ()):
            if index < len(args):
                dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
                targets.append((args[index], dir_fd, True))
    found = []
    for path, dir_fd, write in targets:
        p = _absolute(path, dir_fd, cwd)
        if p is None or any(_under(p, s) for s in skip):
            continue
        bytecode = f"{os.sep}__pycache__" in p
        if _under(p, project):
            if write and not bytecode and not _pytest_cache(p, project):
                found.append(("project", p))
        elif home is not None and _under(p, home):
            if not write:
                if not any(_under(p, r) for r in readable):
                    found.append(("home-read", p))
            elif not bytecode:
                found.append(("home", p))
    return found


def _pytest_cache(path: str, project: str) -> bool:
    """True for pytest's own cache in the project: ``.pytest_cache``, the temporary
    ``pytest-cache-files-*`` folder pytest fills and renames to it on a first run, and the
    project folder itself as the parent of that rename."""
    if os.path.normpath(path) == os.path.normpath(project):
        return True
    first = os.path.relpath(path, project).split(os.sep)[0]
    return first == ".pytest_cache" or first.startswith("pytest-cache-files-")


def _hook(event: str, args: tuple) -> None:
    if event not in _EVENTS:
        return
    state = _installed
    try:
        found = classify(event, args, project=state["project"], home=state["home"], skip=state["skip"], readable=state["readable"])
    except Exception:  # an audit hook must never break the call it watches
        return
    if not found:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "")
    lines = "".join(f"{kind}\t{path}\t{test}\t{os.getpid()}\n" for kind, path in found)
    try:
        with open(os.path.join(state["log"], f"{os.getpid()}.log"), "a", encoding="utf-8") as f:
            f.write(lines)
    except OSError:
        pass


def install(log: str, project: str, home: str | None, readable: tuple[str, ...] = ()) -> None:
    """Record this process's writes under ``project`` and its writes and reads under
    ``home`` (None: not watched; reads under ``readable`` excepted) into the folder ``log``
    (absolute; must exist). Once per
    process: later calls change nothing (an audit hook cannot be removed)."""
    global _installed
    if _installed is not None:
        return
    project = os.path.normpath(os.path.abspath(project))
    home = os.path.normpath(os.path.abspath(home)) if home else None
    if home in ("/", project):
        home = None
    skip = {os.path.normpath(os.path.abspath(log))}
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        skip.add(os.path.normpath(prefix))
        skip.add(os.path.realpath(prefix))
    readable = tuple(os.path.normpath(os.path.abspath(r)) for r in readable if r)
    _installed = {"log": os.path.abspath(log), "project": project, "home": home, "skip": tuple(skip), "readable": readable}
    sys.addaudithook(_hook)


def install_from_env() -> bool:
    """:func:`install` with the folders the test session put in the environment
    (:data:`ENV_LOG`, :data:`ENV_PROJECT`, :data:`ENV_HOME`, :data:`ENV_READABLE`); False (nothing installed)
    outside a test session, i.e. when :data:`ENV_LOG` or :data:`ENV_PROJECT` is unset."""
    log, project = os.environ.get(ENV_LOG), os.environ.get(ENV_PROJECT)
    if not log or not project or not os.path.isdir(log):
        return False
    install(log, project, os.environ.get(ENV_HOME) or None, tuple(os.environ.get(ENV_READABLE, "").split(os.pathsep)))
    return True


def read_records(log: str) -> list[tuple[str, str, str, str]]:
    """Every record in the folder ``log``: ``(kind, path, test, pid)`` tuples in file order,
    files by name; malformed lines are skipped. A missing folder has none."""
    records = []
    try:
        names = sorted(os.listdir(log))
    except FileNotFoundError:
        return records
    for name in names:
        if not name.endswith(".log"):
            continue
        with open(os.path.join(log, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 4:
                    records.append(tuple(parts))
    return records
