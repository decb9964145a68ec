"""Embedding on a Ray cluster (``embedding.distributed=ray``).

When one machine is too small or too slow to embed a corpus, the blocks of texts that miss
the caches are embedded by Ray actors (Moritz et al., "Ray: A Distributed Framework for
Emerging AI Applications", OSDI 2018; the ``ray`` library, ``pip install 'harness[ray]'``).
Each actor is a worker process that loads the model once and embeds whole blocks. The
process that runs the experiment (the driver) keeps everything else:

* it reads the memory and disk caches and sends only the misses out;
* the blocks are the ones a single process embeds (texts sorted longest first,
  ``4 * batch_size`` per block), and each block is embedded by one
  ``Encoder._embed_batch`` call on one actor, so every batch holds the same texts as in a
  single-process run and the vectors are bitwise identical to it on the same CPU type
  (the actors use the driver's torch thread count unless ``embedding.ray_threads`` says
  otherwise);
* it writes each block's vectors to the embedding cache once, as the block comes back;
  actors never open the cache.

Before the first block every actor reports its embedding key (model identity and folder
fingerprint, window, normalisation, precision) and library versions: an actor whose key
differs from the driver's (other weights on that node) is refused, other library versions
are warned about (they may change the last bits of a vector).

Settings (``conf/embedding/sentence_transformers.yaml``): ``distributed`` (null | ray),
``ray_address`` (null: ``RAY_ADDRESS`` or the cluster started on this machine with
``ray start``, else a new local Ray instance; ``auto``; ``host:port`` of a head node;
``ray://host:10001`` for Ray Client), ``ray_workers`` (actors; null: the cluster's free
CPUs divided by ``ray_threads``), ``ray_threads`` (torch threads and CPUs per actor; null:
the driver's torch thread count).

Ray is imported only here and only when ``distributed=ray``.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import os
import socket
import warnings
from collections import deque
from typing import Any, Iterator

import numpy as np

#: Accepted values of ``embedding.distributed``.
DISTRIBUTED = (None, "ray")
#: Libraries whose versions the actors must share with the driver for identical vectors.
VERSIONED = ("torch", "transformers", "sentence-transformers", "numpy")
#: Blocks queued per actor (one running, one waiting, so an actor never idles between blocks).
DEPTH = 2
#: Seconds to wait for a TCP answer from ``ray_address`` before giving up.
CONNECT_TIMEOUT_S = 5.0


def check_settings(distributed: Any, address: Any, workers: Any, threads: Any) -> None:
    """Validate the distributed settings (nothing is imported or contacted).

    Raises:
        ValueError: ``distributed`` not null or ``"ray"``; ``ray_address`` not null or a
            non-empty string; ``ray_workers`` / ``ray_threads`` not null or an integer >= 1;
            a ``ray_*`` setting given while ``distributed`` is null (it would be ignored).
    """
    from harness.embeddings.base import check_choice
    from harness.params import Param

    check_choice("embedding.distributed", distributed, DISTRIBUTED)
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ValueError(f"embedding.ray_address must be null, 'auto', 'host:port' or 'ray://host:port', got {address!r}")
    for name, value in (("ray_workers", workers), ("ray_threads", threads)):
        Param(name, "int", low=1, allow_none=True, none="null or {}").check(value, "embedding")
    if distributed is None:
        given = [f"{n}={v!r}" for n, v in (("ray_address", address), ("ray_workers", workers), ("ray_threads", threads)) if v is not None]
        if given:
            raise ValueError(f"embedding.{given[0].split('=')[0]} is set ({', '.join(given)}) but embedding.distributed is null; set embedding.distributed=ray")


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for ``auto`` and other forms."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def preflight(address: str | None) -> None:
    """Check, before any chunking, that Ray is installed and ``address`` answers.

    Raises:
        ValueError: Ray is not installed (one line naming the extra to install);
            ``address`` is ``host:port`` / ``ray://host:port`` and nothing answers there
            within :data:`CONNECT_TIMEOUT_S` seconds.
    """
    try:
        importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        raise ValueError("embedding.distributed=ray needs Ray, which is not installed: pip install 'harness[ray]'") from None
    where = _host_port(address) if address else None
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ValueError(
            f"embedding.ray_address={address!r}: no Ray head answers at {where[0]}:{where[1]} ({exc.strerror or type(exc).__name__}); "
            f"start one there with `ray start --head --port={where[1]}` or correct the address"
        ) from None


def versions() -> dict[str, str | None]:
    """Installed versions of :data:`VERSIONED` (None when a library is missing)."""
    out: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def driver_threads() -> int:
    """The torch intra-op thread count of this process (what a single-process run embeds with)."""
    import torch

    return int(torch.get_num_threads())


class EmbeddingWorker:
    """One Ray actor's state: an encoder built from the driver's recipe, model loaded once.

    Args:
        recipe: keyword arguments of :class:`harness.embeddings.model.Encoder` (no cache,
            no prompts: texts arrive prompted; the precision as the driver resolved it).
        threads: torch intra-op threads, >= 1.
    """

    def __init__(self, recipe: dict[str, Any], threads: int) -> None:
        import torch

        torch.set_num_threads(int(threads))
        from harness.embeddings.model import Encoder

        self.encoder = Encoder(**recipe)
        self.encoder.preflight()
        self.encoder._prepare()  # noqa: SLF001 - the model loads once, before the first block

    def describe(self) -> dict[str, Any]:
        """``{"embedding_key", "versions", "threads", "pid", "host"}`` of this actor."""
        import torch

        return {
            "embedding_key": self.encoder.embedding_key,
            "versions": versions(),
            "threads": int(torch.get_num_threads()),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of one block (float32, ``(len(texts), dim)``), in the batches a single process
        uses (``Encoder._embed_block``)."""
        return self.encoder._embed_block(texts)  # noqa: SLF001


class RayPool:
    """Actors that embed blocks for one driver-side encoder (started on first use).

    Args:
        recipe: the worker encoder's keyword arguments (see :class:`EmbeddingWorker`).
        embedding_key: the driver's key; every actor must report the same.
        address: ``embedding.ray_address``.
        workers: ``embedding.ray_workers`` (None: free CPUs // threads, at least 1).
        threads: ``embedding.ray_threads`` (None: :func:`driver_threads`).

    Attributes:
        actors: the actor handles once started; infos: what each reported (:meth:`EmbeddingWorker.describe`).
    """

    def __init__(self, recipe: dict[str, Any], embedding_key: str, address: str | None, workers: int | None, threads: int | None) -> None:
        self.recipe = recipe
        self.embedding_key = embedding_key
        self.address = address
        self.workers = workers
        self.threads = threads
        self.actors: list[Any] = []
        self.infos: list[dict[str, Any]] = []

    def _connect(self):
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING"}
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            where = _host_port(self.address) if self.address else None
            local = self.address is None and not os.environ.get("RAY_ADDRESS")
            if (where is not None and is_loopback(where[0])) or local:
                kwargs["_node_ip_address"] = "127.0.0.1"  # Ray would otherwise put the machine's address in its place
            try:
                ray.init(address=self.address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ValueError(f"embedding.ray_address={self.address!r}: could not connect to a Ray cluster: {first}") from None
        return ray

    def start(self) -> None:
        """Connect to the cluster, start the actors and check what they report.

        Raises:
            ValueError: no node has ``threads`` CPUs; ``workers * threads`` exceeds the
                cluster's CPUs; an actor failed to load the model (its first error line);
                an actor's embedding key differs from the driver's.
        """
        if self.actors:
            return
        ray = self._connect()
        threads = self.threads if self.threads is not None else driver_threads()
        node_cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
        largest, total = max(node_cpus, default=0.0), sum(node_cpus)
        if threads > largest:
            raise ValueError(
                f"embedding.ray_threads={threads}: no node of the Ray cluster has {threads} CPUs (largest: {largest:g}); "
                f"set embedding.ray_threads to at most {int(largest)}"
            )
        if self.workers is None:
            free = float(ray.available_resources().get("CPU", 0))
            workers = max(1, int(free // threads))
        else:
            workers = self.workers
            if workers * threads > total:
                raise ValueError(
                    f"embedding.ray_workers={workers} x embedding.ray_threads={threads} needs {workers * threads} CPUs; "
                    f"the Ray cluster has {total:g}: lower either setting"
                )
        cls = ray.remote(EmbeddingWorker).options(num_cpus=threads, max_restarts=0)
        actors = [cls.remote(self.recipe, threads) for _ in range(workers)]
        try:
            infos = ray.get([a.describe.remote() for a in actors])
        except ray.exceptions.RayError as exc:
            for a in actors:
                ray.kill(a)
            raise ValueError(f"embedding.distributed=ray: a worker could not load embedding.model {self.recipe['model']!r}: {_first_error_line(exc)}") from None
        for info in infos:
            if info["embedding_key"] != self.embedding_key:
                for a in actors:
                    ray.kill(a)
                raise ValueError(
                    f"embedding.distributed=ray: the worker on {info['host']} (pid {info['pid']}) has another embedding.model "
                    f"{self.recipe['model']!r} (embedding key {info['embedding_key'][:12]} against {self.embedding_key[:12]} here: "
                    f"other weights, tokenizer or window); install the same model on every node"
                )
        mine = versions()
        for info in infos:
            other = {k: (mine[k], v) for k, v in info["versions"].items() if v != mine.get(k)}
            if other:
                warnings.warn(
                    f"embedding.distributed=ray: the worker on {info['host']} runs "
                    + ", ".join(f"{k} {theirs} (here {ours})" for k, (ours, theirs) in other.items())
                    + ": its vectors may differ in the last bits from this machine's",
                    stacklevel=3,
                )
                break
        self.actors, self.infos = actors, infos

    def embed_blocks(self, blocks: list[list[tuple[str, str]]], checkpoint=None) -> Iterator[tuple[list[tuple[str, str]], np.ndarray]]:
        """``(block, vectors)`` per block as the actors finish them (at most :data:`DEPTH`
        queued per actor; ``checkpoint()`` runs before each block is sent).

        Raises:
            ValueError: an actor failed while embedding (its first error line).
        """
        import ray

        self.start()
        pending = deque(blocks)
        load = {i: 0 for i in range(len(self.actors))}
        inflight: dict[Any, tuple[int, list[tuple[str, str]]]] = {}
        while pending or inflight:
            while pending and min(load.values()) < DEPTH:
                i = min(load, key=load.get)
                if checkpoint is not None:
                    checkpoint()
                part = pending.popleft()
                inflight[self.actors[i].embed.remote([t for _, t in part])] = (i, part)
                load[i] += 1
            done, _ = ray.wait(list(inflight), num_returns=1)
            for ref in done:
                i, part = inflight.pop(ref)
                load[i] -= 1
                try:
                    vecs = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise ValueError(f"embedding.distributed=ray: a worker failed while embedding: {_first_error_line(exc)}") from None
                yield part, vecs

    def close(self) -> None:
        """Stop the actors (the model memory on the cluster is freed); the connection stays."""
        if self.actors:
            import ray

            for a in self.actors:
                ray.kill(a)
        self.actors = []


def _first_error_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip()
