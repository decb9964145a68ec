"""Configuration errors as one line each: what is wrong, where, what is allowed, what was meant.

A run checks its whole configuration before it opens an MLflow run (see
:func:`harness.experiment.run.validate`): the ``metrics``/``stats`` settings, the chunker,
retriever, embedding and compression constructors, and the dataset loader. Whatever they
refuse becomes a :class:`ConfigError`, which ``harness run`` prints as one line on stderr
(exit code 2, no traceback, no run in the store). Hydra's own composition errors (an
unknown key such as ``chunker.chunk_sise=300``, an unknown option such as
``chunker=recursiv``, a malformed override, a value that needs quoting: the line then shows
the quoted form, :func:`quoted_override`) get the same treatment through
:func:`hydra_error_line`. Suggestions come from :mod:`difflib` (``get_close_matches``).
"""

from __future__ import annotations

import difflib
import inspect
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

#: Constructor arguments a run passes itself (never written in a config file).
INJECTED = frozenset({"self", "encoder", "cache_dir"})


class ConfigError(ValueError):
    """A setting the run cannot use, found before any MLflow run was opened.

    The message is one line naming the setting (``chunker.chunk_overlap``), the value and
    what is allowed, with ``did you mean ...`` for a misspelt name. The original error is
    the exception's ``__cause__``.
    """


def one_line(text: str) -> str:
    """``text`` with its lines joined by ``"; "`` (blank lines and surrounding space dropped)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean <prefix><closest>?"`` for the closest of ``known`` to ``name``
    (:func:`difflib.get_close_matches`, default cut-off 0.6), else ``""``."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def sweep_option_error(argv: Iterable[str], conf_dir: str | Path) -> str | None:
    """One line for the first unknown config-group option among the sweep overrides of
    ``argv`` (``chunker=fixed,recursiv``), else None.

    Hydra composes a multirun's jobs one by one, so an unknown option would only fail when its
    job is reached, after the sweep's parent run exists and with the jobs after it never run;
    this checks every ``group=a,b,...`` override whose ``group`` is a folder of ``conf_dir``
    (its options: the ``*.yaml`` files there) before anything starts. Overrides of settings
    (``chunker.chunk_size=...``), appends (``+``), deletions (``~``), sweep functions
    (``range(...)``, ``choice(...)``) and Hydra's own groups (``hydra/...``) are left to Hydra.
    Options in the folders of a ``hydra.searchpath=[file://...]`` override count too.
    """
    argv = list(argv)
    roots = [Path(conf_dir), *_search_folders(argv)]
    for arg in argv:
        if "=" not in arg or arg.startswith(("-", "+", "~")):
            continue
        group, _, value = arg.partition("=")
        if "." in group or group.startswith("hydra") or "(" in value or not any((r / group).is_dir() for r in roots):
            continue
        options = sorted({p.stem for r in roots for p in (r / group).glob("*.yaml")})
        for option in (v.strip() for v in value.split(",")):
            if option and option != "null" and option not in options:
                return f"{group}={option}: no such option{did_you_mean(option, options, group + '=')} (options: {', '.join(options)})"
    return None


def _search_folders(argv: Sequence[str]) -> list[Path]:
    """The local folders (``file://`` entries) of a ``hydra.searchpath=[...]`` override in ``argv``."""
    out = []
    for arg in argv:
        if arg.startswith("hydra.searchpath="):
            for entry in arg.partition("=")[2].strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    out.append(Path(entry[len("file://") :]))
    return out


def repeated_override_error(argv: Iterable[str]) -> str | None:
    """One line for the first setting given twice among the overrides of a single run's
    ``argv`` (``chunker.chunk_size=128 chunker.chunk_size=512``), else None.

    Hydra applies overrides in order, so the first value does not take effect: ``harness
    run`` prints this line as a warning (scripts append overrides to a base list, so it is
    not refused). A sweep (``-m``) is checked by :func:`harness.tracking.callbacks.plan_sweep`,
    which refuses it, since there the first value's jobs would silently not run; an argument Hydra's grammar cannot read, options (``-cn``, ``--cfg``) and
    deletions (``~key``) are left to Hydra. Keys are compared as Hydra parses them (with
    their ``@package``), so ``+a=1 a=2`` is a repetition too.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    first: dict[tuple[str, str | None], str] = {}
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            (override,) = parser.parse_overrides([arg])
        except Exception:  # noqa: BLE001 - Hydra reports its own grammar errors
            continue
        if override.is_delete():
            continue
        key = (override.key_or_group, override.package)
        if key in first:
            name = override.get_key_element().lstrip("+")
            return f"{name}: given twice ({first[key]} and {arg}); the last one takes effect (to compare both, sweep them: -m {name}=<a>,<b>)"
        first[key] = arg
    return None


def quoted_override(override: str) -> str | None:
    """``override`` as a shell word whose value Hydra reads as exactly the text after the
    first ``=``, e.g. ``dataset.path=a=b`` -> ``'dataset.path="a=b"'``; None when there is no
    ``key=`` or even the quoted form does not parse (a malformed key).

    The value is put in Hydra's double quotes (single quotes when it holds ``"`` and not
    ``'``); inside them Hydra's grammar treats ``=``, ``#``, ``,``, brackets and regex
    characters as text and only a quote, or backslashes before a quote or the end, need a
    backslash (Hydra's override grammar, "Quoted values"). The whole override is then put in
    the shell's single quotes (:func:`shlex.quote`), since the shell would otherwise remove
    Hydra's quotes. The result is checked: split as a POSIX shell does, it parses with
    Hydra's ``OverridesParser`` to the same key and value. ``${...}`` in the value stays an
    interpolation (Hydra resolves it inside quotes too).
    """
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    key, sep, value = str(override).partition("=")
    if not sep or not key.strip():
        return None
    quote = "'" if '"' in value and "'" not in value else '"'
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            j = i
            while j < len(value) and value[j] == "\\":
                j += 1
            run = value[i:j]
            out.append(run * 2 if j == len(value) or value[j] == quote else run)
            i = j
        else:
            out.append("\\" + quote if value[i] == quote else value[i])
            i += 1
    form = f"{key}={quote}{''.join(out)}{quote}"
    try:
        (parsed,) = OverridesParser.create().parse_overrides([form])
    except Exception:  # noqa: BLE001 - the key itself is malformed: no hint
        return None
    if parsed.is_sweep_override() or parsed.value() != value:
        return None
    return shlex.quote(form)


def _grammar_reason(exc: BaseException) -> str:
    """Hydra's reason for refusing an override, short: ``at '#'`` for a lexer error (the
    character under Hydra's caret), else its parser message."""
    lines = [ln for ln in str(getattr(exc, "message", exc)).splitlines() if ln.strip()]
    override = str(getattr(exc, "override", ""))
    for n, line in enumerate(lines):
        prefix = "LexerNoViableAltException: "
        if line.startswith(prefix) and n + 1 < len(lines) and lines[n + 1].strip() == "^":
            at = len(lines[n + 1].rstrip()) - 1 - len(prefix)
            text = line[len(prefix) :]
            if 0 <= at < len(text):
                return f"at {text[at]!r}"
    kept = [ln.strip() for ln in lines if not ln.startswith(("See https://", "Error parsing override", "LexerNoViableAltException")) and ln.strip() != "^"]
    return "; ".join(kept) or f"cannot parse {override!r}"


def settings_of(target: str) -> list[str]:
    """The keyword settings a ``_target_`` (class or function) accepts, in signature order,
    without the ones a run passes itself (:data:`INJECTED`) and without ``*args``/``**kwargs``.
    Empty when the target cannot be imported or inspected."""
    from hydra.utils import get_object

    try:
        obj = get_object(target)
        sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except Exception:  # noqa: BLE001 - a suggestion must never hide the real error
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.name not in INJECTED]


_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")
_MISSING = re.compile(r"missing \d+ required (?:positional |keyword-only )?arguments?: (.+)$")


def from_exception(exc: BaseException, group: str, node: Any = None) -> ConfigError:
    """A :class:`ConfigError` for an error raised while building config group ``group``.

    A ``TypeError`` for an unknown keyword (a setting added with ``+group.key=...``) names
    the setting, the closest one the constructor takes (from its signature) and all of
    them; a missing required argument names the settings to set; any other error keeps its
    message (the constructors name the setting and the allowed values), on one line.

    Args:
        exc: the constructor's (or loader's) exception.
        group: the config group, e.g. ``"chunker"``.
        node: the group's config (for its ``_target_``), or None.
    """
    target = str(node.get("_target_", "")) if node is not None and hasattr(node, "get") else ""
    text = str(exc)
    if isinstance(exc, TypeError):
        known = settings_of(target) if target else []
        where = f"{group} ({target})" if target else group
        m = _UNEXPECTED.search(text)
        if m:
            key = m.group(1)
            listed = f" (settings: {', '.join(known)})" if known else ""
            return ConfigError(f"{group}.{key}: unknown setting of {where}{did_you_mean(key, known, group + '.')}{listed}")
        m = _MISSING.search(text)
        if m:
            names = [n.strip(" '\"") for n in re.split(r",| and ", m.group(1)) if n.strip(" '\"")]
            return ConfigError(f"{', '.join(group + '.' + n for n in names)}: required by {where}, not set")
    message = one_line(text) or type(exc).__name__
    if isinstance(exc, (ImportError, AttributeError)) and target:  # a _target_ that does not exist
        m = re.search(r"(No module named '[^']+'|has no attribute '[^']+')", text)
        return ConfigError(f"{group}._target_={target!r}: cannot be imported ({m.group(1) if m else message})")
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
        return ConfigError(f"{group}: {message}")
    if isinstance(exc, FileNotFoundError):
        return ConfigError(f"{group}: file or folder not found: {message}")
    return ConfigError(message if group in message or "." in message.split(" ", 1)[0] else f"{group}: {message}")


def group_setting(key: str, root) -> str | None:
    """What a top-level ``key`` that is not a top-level key of ``root`` (the composed config)
    probably meant: ``group.key`` for every config group that has the setting ``key``
    (``chunk_size`` -> ``chunker.chunk_size``; several joined by `` or ``), else the closest
    ``group.setting`` by :func:`did_you_mean`'s rule when the key is misspelt as well
    (``chunk_sise`` -> ``chunker.chunk_size``), else None (then the group names are the better
    guess, as when a top-level key is at least as close: ``chunkr`` -> ``chunker``).
    Hydra's own ``hydra`` group and ``_target_`` are never suggested."""
    groups = []
    for name in root.keys():
        if str(name) == "hydra":
            continue
        node = root._get_node(name)  # the node itself: no interpolation is resolved here
        if node is not None and hasattr(node, "keys"):
            groups.append((str(name), [str(k) for k in node.keys() if str(k) != "_target_"]))
    exact = [f"{g}.{key}" for g, keys in groups if key in keys]
    if exact:
        return " or ".join(exact)
    close = difflib.get_close_matches(str(key), [k for _, keys in groups for k in keys], n=1)
    if not close:
        return None
    ratio = lambda a: difflib.SequenceMatcher(None, str(key), a).ratio()  # noqa: E731 - difflib's own score
    if any(ratio(str(name)) >= ratio(close[0]) for name in root.keys()):
        return None  # a top-level key is as close: a misspelt group (chunkr -> chunker)
    return " or ".join(f"{g}.{close[0]}" for g, keys in groups if close[0] in keys)


def hydra_error_line(exc: BaseException) -> str | None:
    """One line for a Hydra composition error, or None when ``exc`` is not one.

    Covers an override of a key the config does not have (``chunker.chunk_sise=300``: the
    closest key and the group's keys), an unknown option of a config group
    (``chunker=recursiv``: the closest option and all of them), a malformed override, and a
    missing mandatory value (``???``). An override whose value Hydra's grammar cannot read
    unquoted (``=``, ``#``, a regex such as ``^\\d+$``) is named with the form to type instead
    (:func:`quoted_override`), e.g. ``'dataset.path="a=b"'``.
    """
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    cause = exc.__cause__
    if isinstance(exc, ConfigCompositionException) and isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        full_key = str(cause.full_key)
        parent = getattr(cause, "parent_node", None)
        known = [str(k) for k in parent.keys()] if parent is not None and hasattr(parent, "keys") else []
        head, _, key = full_key.rpartition(".")
        prefix = head + "." if head else ""
        if known and key not in known:
            listed = [k for k in known if k != "_target_"]
            if not head:
                meant = group_setting(key, parent)
                if meant:
                    return f"{full_key}: unknown setting; did you mean {meant}? (a group's settings are written group.key; groups: {', '.join(listed)})"
            return f"{full_key}: unknown setting{did_you_mean(key, listed, prefix)} ({head or 'config'} settings: {', '.join(listed)})"
        return f"{full_key}: {one_line(str(cause).split('full_key:')[0])}"
    if isinstance(exc, MissingConfigException) and getattr(exc, "options", None):
        m = re.search(r"Could not find '([^']+)'", str(exc))
        wanted = m.group(1) if m else str(getattr(exc, "missing_cfg_file", "") or "")
        group, _, option = wanted.rpartition("/")
        options = list(exc.options)
        return f"{group}={option}: no such option{did_you_mean(option, options, group + '=')} (options: {', '.join(options)})"
    parse_error = next((e for e in (exc, cause, exc.__context__) if isinstance(e, OverrideParseException)), None)
    if parse_error is not None and getattr(parse_error, "override", None):
        hint = quoted_override(str(parse_error.override))
        if hint is not None:
            return f"{parse_error.override}: Hydra cannot read this value unquoted ({_grammar_reason(parse_error)}); quote it for Hydra and the shell: {hint}"
    if isinstance(exc, (ConfigCompositionException, MissingConfigException, OverrideParseException)):
        return one_line(str(exc))
    if isinstance(exc, OmegaConfBaseException):
        return one_line(str(exc))
    return None
