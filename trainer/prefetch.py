"""Overlap: the next batches' ingestion (parsing), feature building and (async) pull run ahead
of the step that computes the current one, in a thread or in a child process.

``thread`` (:class:`Prefetcher`): parsing, deduplication and pooling are numba kernels that
release the GIL, numpy's matmul and ZeroMQ too, so a thread overlaps without copying.
``process`` (:class:`ProcessPrefetcher`): a child process runs the producer and hands each
item over as ZeroMQ frames: the item is pickled with its numpy arrays out of band (pickle
protocol 5) and the receiver's arrays are views of the received frames (one kernel copy
through the socket, none in Python). Both keep the order of the source, re-raise the
producer's error in the consumer at the item where it happened, stop within ``close()``,
and keep the producer's return value (e.g. counts of rejected records) in ``result``.

On a quiet machine the thread is faster (a child adds memory and its workers wait longer for
batches); on a busy one the process is (a thread contends for the GIL with the step's Python
between its BLAS calls, a process does not): bench/RESULTS.md. So
``streamrec train-files`` defaults to ``thread``, and ``--prefetch process`` is there for busy
hosts. The streaming job
keeps the thread: its Kafka consumer and offset tracker are shared with the training loop
(offsets marked after each step, re-seeks on rollback), which a child process cannot share.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

import zmq

from core.errors import Unavailable
from core.processes import die_with_parent
from trainer.process_stats import peak_rss_mb

T = TypeVar("T")
PrefetchKind = Literal["thread", "process"]
_DONE = object()


class Prefetcher(Iterator[T]):
    """Iterates ``fn(x)`` for x in ``source``, computed ``depth`` items ahead in a thread."""

    def __init__(self, source: Iterable[Any], fn: Callable[[Any], T] | None = None, *, depth: int = 2) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.result: Any = None  # the source generator's return value, once it is exhausted
        self.stats: dict[str, float] = {}  # nothing outside this process (see ProcessPrefetcher.stats)
        self._thread = threading.Thread(target=self._run, args=(source, fn), name="prefetch", daemon=True)
        self._thread.start()

    def _run(self, source: Iterable[Any], fn: Callable[[Any], T] | None) -> None:
        it = iter(source)
        try:
            while not self._stop.is_set():
                try:
                    x = next(it)
                except StopIteration as end:
                    self.result = end.value
                    break
                self._put(x if fn is None else fn(x))
            self._put(_DONE)
        except BaseException as exc:  # re-raised in the consumer's thread
            self._put(exc)
        finally:
            close = getattr(it, "close", None)
            if close is not None:  # a generator stopped early runs its cleanup here, in its own thread
                close()

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

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it (None: until it ended; one inside
        a PS call ends with its client's retries)."""
        self._stop.set()
        self._thread.join(timeout=timeout)


# ----------------------------------------------------------------------------- process
_ITEM, _END, _ERROR = b"item", b"end", b"error"
_MORE, _STOP = b"more", b"stop"
_POLL_MS = 200


def _pack(kind: bytes, obj: Any) -> list[Any]:
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return [kind, head, *buffers]


def _error_frames(exc: BaseException) -> list[Any]:
    try:
        frames = _pack(_ERROR, exc)
        pickle.loads(frames[1], buffers=frames[2:])  # some exceptions pickle but do not unpickle
        return frames
    except Exception:  # an exception that does not pickle still reaches the consumer, as text
        import traceback

        text = "".join(traceback.format_exception(exc))
        return _pack(_ERROR, Unavailable(f"prefetch process failed: {exc!r}\n{text}"))


def _child(produce: Callable[[], Iterable[Any]], endpoint: str, depth: int, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this stops
    # The kernel kills this process when its parent dies (no orphan keeps pulling). The signal
    # follows the parent THREAD that started the child: create a ProcessPrefetcher on a thread
    # that outlives it (the training loop's).
    die_with_parent()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 5000)  # the end/error message still goes out after close
    sock.connect(endpoint)
    credit = depth

    def wait_credit() -> bool:
        """False when the consumer stopped (or died)."""
        nonlocal credit
        while True:
            if sock.poll(0 if credit else _POLL_MS):
                if sock.recv() == _STOP:
                    return False
                credit += 1
                continue
            if credit:
                return True
            if os.getppid() != parent:
                return False

    try:
        it = iter(produce())
        while wait_credit():
            try:
                item = next(it)
            except StopIteration as end:
                stats = {"peak_rss_mb": peak_rss_mb(), "cpu_s": time.process_time()}
                sock.send_multipart(_pack(_END, (end.value, stats)), copy=False)
                break
            sock.send_multipart(_pack(_ITEM, item), copy=False)
            credit -= 1
    except BaseException as exc:  # handed to the consumer, raised there
        sock.send_multipart(_error_frames(exc), copy=False)
    finally:
        sock.close()
        ctx.term()


class ProcessPrefetcher(Iterator[T]):
    """Iterates the items of ``produce()``, which runs in a child process ``depth`` items ahead.

    ``produce`` must pickle (a module-level function or a ``functools.partial`` of one): the
    child is started with ``spawn``, so it shares no threads, sockets or locks with this one.
    """

    def __init__(self, produce: Callable[[], Iterable[T]], *, depth: int = 2) -> None:
        self.result: Any = None
        self.stats: dict[str, float] = {}  # the child's peak RSS and CPU seconds, once its source ended
        self._done = False
        self._dir = tempfile.mkdtemp(prefix="streamrec-prefetch-")
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PAIR)
        self._sock.setsockopt(zmq.LINGER, 0)
        endpoint = f"ipc://{self._dir}/items"
        self._sock.bind(endpoint)
        mp = multiprocessing.get_context("spawn")
        self._proc = mp.Process(target=_child, args=(produce, endpoint, depth, os.getpid()), name="prefetch",
                                daemon=True)
        self._proc.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        while not self._sock.poll(_POLL_MS):
            if not self._proc.is_alive() and not self._sock.poll(0):
                self._done = True
                raise Unavailable(f"prefetch process exited (code {self._proc.exitcode}) before its source ended")
        kind, head, *frames = self._sock.recv_multipart(copy=False)
        # arrays come back as views of the frames: no copy here, and they live as long as needed
        obj = pickle.loads(head.buffer, buffers=[f.buffer for f in frames])
        kind_b = kind.bytes
        if kind_b == _ITEM:
            with contextlib.suppress(zmq.Again):  # (a child that already ended has no peer socket left)
                self._sock.send(_MORE, zmq.NOBLOCK)  # one item taken: the child may produce one more
            return obj
        self._done = True
        if kind_b == _ERROR:
            raise obj
        self.result, self.stats = obj
        raise StopIteration

    def close(self) -> None:
        """Stop the child (it may be blocked in the producer: then it is terminated) and clean up."""
        if self._proc.is_alive():
            with contextlib.suppress(zmq.ZMQError):
                self._sock.send(_STOP, zmq.NOBLOCK)
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        else:
            self._proc.join()
        self._sock.close()
        self._ctx.term()
        self._proc.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def start_prefetch(kind: PrefetchKind, produce: Callable[[], Iterable[T]], *,
                   depth: int = 2) -> Prefetcher[T] | ProcessPrefetcher[T]:
    """Items of ``produce()`` computed ahead in a thread or a child process (see the module docstring)."""
    if kind == "process":
        return ProcessPrefetcher(produce, depth=depth)
    if kind == "thread":
        return Prefetcher(produce(), depth=depth)
    from core.errors import ConfigError

    raise ConfigError(f"prefetch must be 'thread' or 'process', got {kind!r}")
