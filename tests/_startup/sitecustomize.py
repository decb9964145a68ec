"""Python runs this at the start of every process whose ``PYTHONPATH`` holds
``tests/_startup``: the test session puts it there, so only the suite's own Python
subprocesses load it. It records their writes into the project folder and the user's home
(:mod:`harness_test_writes`), then runs the ``sitecustomize`` this one hides, if any."""

import importlib.machinery
import importlib.util
import os
import sys

import harness_test_writes

harness_test_writes.install_from_env()

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
