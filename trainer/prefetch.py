"""Overlap: the next batches' ingestion (parsing), feature building and (async) pull run in a
background thread while the current step computes. Parsing, deduplication and pooling are
numba kernels that release the GIL, numpy's matmul and ZeroMQ too, so a thread overlaps
well; a second process would have to copy every batch and rows across (measured in
bench/train.py: threads win here).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()


class Prefetcher(Iterator[T]):
    """Iterates ``fn(x)`` for x in ``source``, computed ``depth`` items ahead in a thread."""

    def __init__(self, source: Iterable[Any], fn: Callable[[Any], T], *, depth: int = 2) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source, fn), name="prefetch", daemon=True)
        self._thread.start()

    def _run(self, source: Iterable[Any], fn: Callable[[Any], T]) -> None:
        try:
            for x in source:
                if self._stop.is_set():
                    return
                self._put(fn(x))
            self._put(_DONE)
        except BaseException as exc:  # re-raised in the consumer's thread
            self._put(exc)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __next__(self) -> T:
        item = self._q.get()
        if item is _DONE:
            self._q.put(_DONE)  # later calls stop too
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
