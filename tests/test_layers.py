"""The import rules between the layers of ``harness/`` (``harness/__init__.py`` and
``docs/architecture.md`` state them), checked on the source of every module with :mod:`ast`:
every ``import`` statement counts, also those inside functions (the project imports heavy
libraries lazily, so a rule checked only at module level would miss most of them).

The rule: ``cli → studies → experiment → components → {text, runtime} → params → types``; a component
imports another component only along an edge of :data:`COMPONENT_IMPORTS`; only
``experiment/build.py`` instantiates from config; Hydra and OmegaConf stay in the layers that
see configs (cli, studies, experiment) and no module reaches into Hydra's private modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "harness"
#: The command modules (``harness/cli/<command>.py``).
COMMANDS = ("run", "compare", "report", "check", "tune", "bench", "generate", "server", "cache", "datasets")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PROJECT_ROOT) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path``; ``from a import b`` yields
    both ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def _sources(folder: str = "") -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(paths, forbidden) -> list[str]:
    return [f"{p.relative_to(PROJECT_ROOT)}:{line} imports {name}" for p in paths for line, name in imports_of(p) if forbidden(name)]


def test_the_checker_sees_lazy_from_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    probe = pkg / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from mlflow.entities import Metric\n    from . import sibling\n    import harness.cli.run as r\n")
    names = [name for _, name in imports_of(probe, root=tmp_path)]
    assert names == ["os", "mlflow.entities", "mlflow.entities.Metric", "pkg", "pkg.sibling", "harness.cli.run"]


def test_commands_never_import_another_command():
    commands = [p for p in _sources("cli") if p.name != "__init__.py"]
    assert sorted(p.stem for p in commands) == sorted(COMMANDS)
    bad = _violations(commands, lambda name: any(_under(name, f"harness.cli.{command}") for command in COMMANDS))
    assert not bad, "a command imports another command (move the shared code into a library layer):\n" + "\n".join(bad)


def test_only_the_tracking_layer_imports_mlflow():
    outside = [p for p in _sources() if "tracking" not in p.relative_to(PACKAGE).parts]
    bad = _violations(outside, lambda name: _under(name, "mlflow"))
    assert not bad, "MLflow used outside harness/tracking:\n" + "\n".join(bad)


#: Imports of harness/text that break its rule today, each to be removed with its fix:
#: ``text/units.py`` asks the embedding package where the model's tokenizer file is.
TEXT_KNOWN: set[tuple[str, str]] = set()


def test_text_layer_imports_only_the_core_types():
    found = {
        (str(p.relative_to(PROJECT_ROOT)), name)
        for p in _sources("text")
        for _, name in imports_of(p)
        if _under(name, "harness") and not (_under(name, "harness.types") or _under(name, "harness.text"))
    }
    modules = {(path, name) for path, name in found if (path, name.rsplit(".", 1)[0]) not in found}  # drop the imported names
    assert modules - TEXT_KNOWN == set(), "harness/text imports a layer above it"
    assert TEXT_KNOWN - modules == set(), "a known exception is gone: remove it from TEXT_KNOWN"


@pytest.mark.parametrize(
    "layer, above",
    [
        ("evaluation", ("harness.experiment", "harness.cli", "harness.chunkers", "harness.retrievers")),
        ("tracking", ("harness.experiment", "harness.cli")),
    ],
)
def test_layer_never_imports_the_layers_above(layer, above):
    bad = _violations(_sources(layer), lambda name: any(_under(name, a) for a in above))
    assert not bad, f"harness/{layer} imports a layer above it:\n" + "\n".join(bad)


@pytest.mark.parametrize("renderer", ["harness.reporting", "harness.evaluation.plots", "matplotlib", "jinja2"])
def test_tracking_logs_what_it_is_given_and_renders_nothing(renderer):
    """Figures and HTML are drawn by harness/reporting (called from harness/experiment), which
    hands the tracker the bytes or the rendering step to run (``Tracker.log_rendered``)."""
    bad = _violations(_sources("tracking"), lambda name: _under(name, renderer))
    assert not bad, f"harness/tracking imports {renderer}:\n" + "\n".join(bad)


def test_one_module_draws_every_figure():
    """``harness/reporting/charts.py`` draws the PNG artifacts and the pages' SVG from the same
    drawing functions; no other module draws (imports matplotlib)."""
    drawing = sorted(str(p.relative_to(PROJECT_ROOT)) for p in _sources() for _, name in imports_of(p) if _under(name, "matplotlib"))
    assert set(drawing) == {"harness/reporting/charts.py"}


# ------------------------------------------------------------------ every package, one rule

#: Rank of every layer: a module imports only layers of lower rank, and its own package.
#: The top-level modules sit with the layer they belong to: ``__main__.py`` and ``run.py``
#: (the ``python -m harness`` / ``python -m harness.run`` entry points) with the commands,
#: ``params.py`` (parameter checks; imports only ``types``) just above ``types``, ``runtime.py`` (process-level helpers: GC pause around heavy imports, torch device and
#: precision, package versions; it imports nothing of the harness) beside ``text/``.
LAYERS: dict[str, int] = {
    "cli": 6,
    "__main__": 6,
    "run": 6,
    "studies": 5,
    "experiment": 4,
    **dict.fromkeys(("chunkers", "retrievers", "embeddings", "datasets", "ingest", "evaluation", "reporting", "tracking", "cache", "llm"), 3),
    "text": 2,
    "runtime": 2,
    "params": 1,
    "types": 0,
}
COMPONENT = 3
#: Top-level modules that belong to a package's layer (they may import that package).
PART_OF = {"__main__": "cli", "run": "cli"}

#: The imports allowed between components, each with its reason; any other component ->
#: component import fails :func:`test_every_module_imports_only_the_layers_below_it`.
COMPONENT_IMPORTS: dict[str, dict[str, str]] = {
    "chunkers": {"llm": "the agentic strategy asks an LLM where to cut"},
    "retrievers": {
        "embeddings": "dense retrieval encodes queries and chunks; shared setting checks and text keys",
        "cache": "rerank keys its score cache by the model folder's fingerprint",
    },
    "embeddings": {"cache": "vectors are cached on disk"},
    "datasets": {
        "ingest": "the folder loader extracts PDF/HTML/JSON files through ingest",
        "llm": "generate asks an LLM for labelled questions",
    },
    "ingest": {},
    "evaluation": {},
    "reporting": {"evaluation": "the sweep report ranks runs with evaluation's comparison"},
    "tracking": {
        "evaluation": "metric keys and per-query tables are logged as evaluation names them",
    },
    "cache": {},
    "llm": {"cache": "replies are cached on disk"},
}


def _layer_of(module: str) -> str | None:
    """Layer of a ``harness.*`` module name (None for a name outside the package)."""
    parts = module.split(".")
    if parts[0] != "harness" or len(parts) == 1:
        return None
    return parts[1]


def _layer_violations(root: Path = PROJECT_ROOT) -> list[str]:
    bad = []
    for path in sorted((root / "harness").rglob("*.py")):
        rel = path.relative_to(root)
        own = rel.parts[1].removesuffix(".py")
        if own == "__init__":
            continue  # harness/__init__.py: the package docstring, imports nothing
        if own not in LAYERS:
            bad.append(f"{rel}: in no layer (add it to LAYERS)")
            continue
        for line, name in imports_of(path, root):
            target = _layer_of(name)
            if target is None or target == own or target == PART_OF.get(own):
                continue
            if target not in LAYERS:
                continue  # an imported name of harness/__init__.py (none today) or a typo caught by the import itself
            if LAYERS[target] < LAYERS[own] and not (LAYERS[own] == COMPONENT == LAYERS[target]):
                continue
            if LAYERS[own] == COMPONENT == LAYERS[target] and target in COMPONENT_IMPORTS[own]:
                continue
            bad.append(f"{rel}:{line} imports {name} ({own} -> {target})")
    return bad


def test_every_module_imports_only_the_layers_below_it():
    bad = _layer_violations()
    assert not bad, "imports against cli → studies → experiment → components → {text, runtime} → params → types:\n" + "\n".join(bad)


def test_the_layer_map_names_every_package_and_top_level_module():
    present = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if (p.is_dir() and (p / "__init__.py").is_file()) or p.suffix == ".py"}
    assert present - {"__init__"} == set(LAYERS)
    assert set(COMPONENT_IMPORTS) == {name for name, rank in LAYERS.items() if rank == COMPONENT}


def test_component_imports_form_no_cycle():
    graph = {a: set(b) for a, b in COMPONENT_IMPORTS.items()}
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, "component import cycle: " + " -> ".join((*path, node))
        if node not in done:
            for nxt in graph[node]:
                visit(nxt, (*path, node))
            done.add(node)

    for node in graph:
        visit(node, ())


def test_the_layer_checker_catches_an_upward_and_an_unlisted_sideways_import(tmp_path):
    pkg = tmp_path / "harness"
    for folder, code in {
        "datasets": "def f():\n    from harness.cli import main\n",  # up two layers, lazily
        "ingest": "from harness.chunkers.modality import CAPTION\n",  # sideways, not in COMPONENT_IMPORTS
        "retrievers": "from harness.embeddings.base import check_choice\n",  # sideways, allowed
        "text": "from harness.types import Span\n",  # down
    }.items():
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
        (pkg / folder / "probe.py").write_text(code)
    (pkg / "stray.py").write_text("")
    bad = _layer_violations(tmp_path)
    assert bad == [
        "harness/datasets/probe.py:2 imports harness.cli (datasets -> cli)",
        "harness/datasets/probe.py:2 imports harness.cli.main (datasets -> cli)",
        "harness/ingest/probe.py:1 imports harness.chunkers.modality (ingest -> chunkers)",
        "harness/ingest/probe.py:1 imports harness.chunkers.modality.CAPTION (ingest -> chunkers)",
        "harness/stray.py: in no layer (add it to LAYERS)",
    ]


# ------------------------------------------------------------------ config to objects: one place

BUILD = PACKAGE / "experiment" / "build.py"
#: The layers that see Hydra's DictConfig (everything below them gets plain values).
CONFIG_LAYERS = ("cli", "studies", "experiment")
#: Modules below those layers that import Hydra anyway, each with its reason.
HYDRA_OUTSIDE_CONFIG_LAYERS = {
    "harness/tracking/callbacks.py": "the sweep callback Hydra calls (a hydra.experimental.callback.Callback), and its override parser",
}


def _instantiations(path: Path) -> list[str]:
    """Lines of ``path`` that instantiate from config: a call of a function named
    ``instantiate`` (``instantiate(...)``, ``hydra.utils.instantiate(...)``, an alias bound by
    ``from hydra.utils import instantiate as x``) or an import of it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {"instantiate"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hydra"):
            for alias in node.names:
                if alias.name == "instantiate":
                    aliases.add(alias.asname or alias.name)
                    found.append(f"{node.lineno}: imports hydra's instantiate")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in aliases:
                found.append(f"{node.lineno}: calls {name}")
    return found


def test_only_the_builder_instantiates_from_config():
    bad = [f"{p.relative_to(PROJECT_ROOT)}:{hit}" for p in _sources() if p != BUILD for hit in _instantiations(p)]
    assert not bad, "config is turned into objects outside harness/experiment/build.py:\n" + "\n".join(bad)
    assert _instantiations(BUILD), "build.py no longer instantiates: the check above looks for the wrong thing"


def test_the_instantiation_check_sees_aliases_and_attribute_calls(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import hydra\n\ndef f(cfg):\n    from hydra.utils import instantiate as make\n    return make(cfg), hydra.utils.instantiate(cfg)\n")
    assert _instantiations(probe) == ["4: imports hydra's instantiate", "5: calls make", "5: calls instantiate"]


#: The component packages whose configs nest other component configs (adaptive routes, the
#: modality text stream, rerank's first stage): they receive a builder from build.py.
NESTING_COMPONENTS = ("chunkers", "retrievers")
#: Modules of those packages that look up a class by its dotted path anyway, each with its reason.
CLASS_LOOKUP_KNOWN = {
    "harness/chunkers/adapter.py": "the LangChain / chonkie splitter an adapter wraps is a class of that library, named by its splitter setting",
}
#: Functions that turn a dotted path into a class or callable.
_LOOKUPS = ("import_module", "get_class", "get_method", "get_object", "_locate", "locate")


def _class_lookups(path: Path) -> list[str]:
    """Lines of ``path`` that look up a class by a dotted path: an import of :mod:`importlib`
    or :mod:`pydoc` (``import_module``, ``locate``) or a call of one of :data:`_LOOKUPS`
    (``importlib.import_module(...)``, Hydra's ``get_class(...)``; an alias is caught at its import)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name in ("importlib", "pydoc")]
        elif isinstance(node, ast.ImportFrom) and node.module in ("importlib", "pydoc", "hydra.utils", "hydra._internal.utils"):
            found += [f"{node.lineno}: imports {node.module}.{a.name}" for a in node.names if a.name in _LOOKUPS]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in _LOOKUPS:
                found.append(f"{node.lineno}: calls {name}")
    return found


def test_nested_component_configs_are_built_by_the_builder():
    """A chunker or retriever never turns a config's ``_target_`` into a class itself: nested
    configs reach build.py through the ``builder=`` their class's ``needs_builder`` asks for."""
    hits = {str(p.relative_to(PROJECT_ROOT)): _class_lookups(p) for folder in NESTING_COMPONENTS for p in _sources(folder)}
    bad = [f"{path}:{hit}" for path, found in hits.items() if path not in CLASS_LOOKUP_KNOWN for hit in found]
    assert not bad, "a component looks up a class by its dotted path (build it in harness/experiment/build.py):\n" + "\n".join(bad)
    assert all(hits.get(path) for path in CLASS_LOOKUP_KNOWN), "a listed exception is gone: remove it from CLASS_LOOKUP_KNOWN"


def test_the_class_lookup_check_sees_importlib_and_hydra(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(target):\n    import importlib\n    from hydra.utils import get_class as g\n    return importlib.import_module(target), g(target)\n"
    )
    assert _class_lookups(probe) == ["2: imports importlib", "3: imports hydra.utils.get_class", "4: calls import_module"]


def test_hydra_and_omegaconf_stay_in_the_config_layers():
    outside = [
        p for p in _sources() if p.relative_to(PACKAGE).parts[0] not in CONFIG_LAYERS and str(p.relative_to(PROJECT_ROOT)) not in HYDRA_OUTSIDE_CONFIG_LAYERS
    ]
    bad = _violations(outside, lambda name: _under(name, "hydra") or _under(name, "omegaconf"))
    assert not bad, "Hydra or OmegaConf imported below cli/, studies/ and experiment/:\n" + "\n".join(bad)
    for path in HYDRA_OUTSIDE_CONFIG_LAYERS:  # the exceptions still need it
        assert any(_under(name, "hydra") for _, name in imports_of(PROJECT_ROOT / path)), path


def _private_hydra_imports(root: Path = PROJECT_ROOT) -> set[tuple[str, str]]:
    """``(module path, imported module)`` of every import of ``hydra._internal`` under ``root/harness``
    and ``root/hydra_plugins`` (the project's sweeper as Hydra loads it)."""
    paths = sorted((root / "harness").rglob("*.py")) + sorted((root / "hydra_plugins").rglob("*.py"))
    found = {(str(p.relative_to(root)), name) for p in paths for _, name in imports_of(p, root) if _under(name, "hydra._internal")}
    return {(path, name) for path, name in found if (path, name.rsplit(".", 1)[0]) not in found}  # drop the imported names


def test_no_private_hydra_api():
    """No exception: a failed run is reported by ``harness/cli/run.py`` itself, and the sweep
    plan's agreement with Hydra's basic sweeper is checked by tests/faults/test_fault_sweeps.py
    (tests may import Hydra's internals; harness/ may not)."""
    assert _private_hydra_imports() == set(), "harness imports a private Hydra module (hydra._internal)"


def test_the_hydra_plugin_only_names_the_sweeper_of_the_studies_layer():
    """``hydra_plugins/`` holds no code of its own: the class Hydra instantiates subclasses
    :class:`harness.studies.screen.GridSweeper`, and nothing else is imported there."""
    paths = sorted((PROJECT_ROOT / "hydra_plugins").rglob("*.py"))
    assert [str(p.relative_to(PROJECT_ROOT)) for p in paths] == ["hydra_plugins/harness_sweeper/__init__.py"]
    assert not (PROJECT_ROOT / "hydra_plugins" / "__init__.py").exists()  # a namespace package, shared with Hydra's other plugins
    assert {name for _, name in imports_of(paths[0])} == {"harness.studies", "harness.studies.screen"}


def test_the_private_hydra_check_sees_a_lazy_import(tmp_path):
    (tmp_path / "harness" / "cli").mkdir(parents=True)
    (tmp_path / "harness" / "cli" / "probe.py").write_text("def f():\n    from hydra._internal.utils import run_and_report\n    import hydra.core.utils\n")
    assert _private_hydra_imports(tmp_path) == {("harness/cli/probe.py", "hydra._internal.utils")}
