"""``harness cache info|clear``: size of the caches, or clear them.

The library is :mod:`harness.cache`.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from harness.cache import DEFAULT_CACHE_DIR, KINDS, Cache


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def main(argv: Sequence[str] | None = None) -> int:
    """``harness cache info|clear [--dir DIR] [--kind embeddings|chunks|llm]``."""
    parser = argparse.ArgumentParser(prog="harness cache", description="Show the size of or clear the harness caches.")
    parser.add_argument("command", choices=("info", "clear"))
    parser.add_argument("--dir", default=str(DEFAULT_CACHE_DIR), help="cache folder (cache.dir; default: %(default)s)")
    parser.add_argument("--kind", choices=KINDS, default=None, help="only this kind of entry (default: all)")
    args = parser.parse_args(argv)
    cache = Cache(args.dir)
    if args.command == "clear":
        before = cache.info()
        cache.clear(args.kind)
        for kind in (args.kind,) if args.kind else KINDS:
            print(f"cleared {kind}: {before[kind]['entries']} entries, {_human(before[kind]['bytes'])}")
        return 0
    info = cache.info()
    print(f"cache folder {cache.root}")
    for kind in (args.kind,) if args.kind else KINDS:
        label = {"embeddings": "vectors", "chunks": "chunk sets", "llm": "replies"}[kind]
        print(f"{kind:<11} {info[kind]['entries']:>9} {label:<10} {_human(info[kind]['bytes']):>10}")
    total = sum(v["bytes"] for v in info.values())
    print(f"{'total':<11} {'':>9} {'':<10} {_human(total):>10}")
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness cache ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
