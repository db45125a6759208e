"""A warm parent that starts roles by ``fork``: a process that imported numpy, numba and
streamrec's modules and loaded numba's registries once, then forks a shard or worker per request,
so each role skips the ~1 s of CPU those cost a fresh interpreter.

The server is exec'd fresh (:class:`ForkServer` starts ``python -m core.fork_server``), so it
inherits no thread, lock or socket of the launcher; it runs no thread of its own and refuses to
serve if a library started one while it loaded, because ``fork`` copies only the calling thread.
A child behaves as the same command exec'd would: its own session (process group), its log as
stdout and stderr, the role's environment and working directory, fresh RNG seeds, ``python -m
mod`` or ``python script`` run as ``__main__``, atexit handlers and non-daemon threads honoured,
its exit code or signal reported to the launcher as ``Popen.returncode`` would be.

Lifetimes: a child gets SIGKILL when the server ends (it is the child's parent), and the server
kills every child's process group and exits when the launcher's end of its socket closes, so a
launcher killed with ``kill -9`` leaves nothing behind, as with ``subprocess``.
Only commands run by this interpreter (``[sys.executable, "-m", mod, ...]`` or ``[sys.executable,
script.py, ...]``) can be forked; :meth:`ForkServer.can_start` says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import IO

from core.processes import die_with_parent, dies_with_parent

# what the server loads before it forks: what every shard and worker imports first
PRELOAD = ("numpy", "numba", "cli.main", "ps.shard_server", "trainer.file_worker")
_MAX_MESSAGE = 1 << 20
# bytes of the server's command line, padded to this, that a child writes its role's command over
_COMMAND_ROOM = 4096


class StartMethod(StrEnum):
    """How a launcher starts shards and workers."""

    FORK_SERVER = "fork_server"  # forked from a warm parent (this module)
    SPAWN = "spawn"  # each exec'd as a fresh interpreter


DEFAULT_START_METHOD = StartMethod.FORK_SERVER  # `up.start_method`'s default, and every launcher's


def _send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


class ForkedProcess:
    """The :class:`subprocess.Popen` verbs a launcher uses (pid, poll, wait, returncode) for a
    child of the fork server, whose exit the server reports."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout_s=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout_s=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return self.returncode


class ForkServer:
    """The launcher's end: starts the server on first use (:meth:`start_role`), from any thread."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._lock = threading.Condition()
        # one request at a time: the server answers in order, so a second thread's request sent while a
        # first one waits could take the first one's pid
        self._request = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._started: list[int] = []  # pids, in the order of the requests
        self._exits: dict[int, int] = {}
        self._live: set[int] = set()  # started, exit not yet reported
        self.refused = False  # the server could not load safely (a library's thread): start roles by exec

    @property
    def server_pid(self) -> int | None:
        """The server's pid once started."""
        return None if self._proc is None else self._proc.pid

    @staticmethod
    def can_start(argv: Sequence[str]) -> bool:
        return len(argv) >= 2 and argv[0] == sys.executable and (
            (argv[1] == "-m" and len(argv) >= 3) or argv[1].endswith(".py"))

    def _ensure(self) -> socket.socket:
        if self.refused:
            raise OSError("the fork server refused to start (threads after preloading; see its stderr)")
        if self._sock is None or self._proc is None or self._proc.poll() is not None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            # its own session: a Ctrl-C meant for the launcher's group does not reach it
            self._proc = subprocess.Popen([sys.executable, "-m", "core.fork_server", str(theirs.fileno()),
                                           " " * _COMMAND_ROOM],  # room for each child's command (_show_command)
                                          env=self.env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                          start_new_session=True, preexec_fn=dies_with_parent())
            theirs.close()
            self._sock = ours
            threading.Thread(target=self._read, args=(ours,), name="fork-server-reader", daemon=True).start()
        return self._sock

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                data, _, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 0)
            except OSError:
                data = b""
            with self._lock:
                if not data:  # the server ended: its children were killed with it
                    if self._sock is sock:
                        self._sock = None
                    self._exits.update(dict.fromkeys(self._live, -signal.SIGKILL))
                    self._live.clear()
                    self._started.append(-1)
                    self._lock.notify_all()
                    return
                message = json.loads(data)
                if "started" in message:
                    self._started.append(message["started"])
                    self._live.add(message["started"])
                else:
                    self._live.discard(message["pid"])
                    self._exits[message["pid"]] = message["code"]
                self._lock.notify_all()

    def start_role(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes]) -> ForkedProcess:
        with self._request, self._lock:
            sock = self._ensure()
            _send(sock, {"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}, [log.fileno()])
            self._lock.wait_for(lambda: self._started)
            pid = self._started.pop(0)
        if pid < 0:
            self.refused = True
            raise OSError("the fork server ended before it started the role")
        return ForkedProcess(self, pid)

    def exit_code(self, pid: int, *, timeout_s: float | None) -> int | None:
        with self._lock:
            self._lock.wait_for(lambda: pid in self._exits, timeout=timeout_s)
            return self._exits.pop(pid, None)

    def close(self) -> None:
        """Stop the server (it kills any child still running)."""
        with self._lock:
            sock, proc, self._sock = self._sock, self._proc, None
            self._lock.notify_all()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; a bare close would not end its recv
            sock.close()
        if proc is not None:
            proc.wait()


def _run_child(sock: socket.socket, request: dict, log_fd: int, server_pid: int) -> None:
    """In the forked child: become the role's process, run its command, exit with its code."""
    code = 1
    try:
        sock.close()
        os.setsid()
        die_with_parent(signal.SIGKILL, parent=server_pid)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        _show_command(request["argv"])
        import random

        import numpy as np

        random.seed()
        np.random.seed()  # a fresh seed, as an exec'd interpreter's
        code = _run_command(request["argv"])
    except SystemExit as end:
        code = _exit_status(end.code)
    except BaseException:  # reported as an interpreter would, then exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at interpreter exit
        import atexit

        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _show_command(argv: list[str]) -> None:
    """Have ``/proc/self/cmdline`` (``ps``, ``pgrep -f``, whatever finds a role by its command) show
    the role's command, not the server's: written over the server's argument area, which its
    padding argument made room for (a longer command is cut); left as it is where the kernel refuses."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of stat
    room = end - start
    command = b"\0".join(os.fsencode(arg) for arg in argv)[: room - 1]
    with contextlib.suppress(OSError), open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(command.ljust(room, b"\0"))  # NUL-ended: read as plain arguments, not a setproctitle title


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_command(argv: list[str]) -> int:
    import runpy
    import warnings

    # the module was preloaded: that is the point, not the mistake runpy warns of
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import", category=RuntimeWarning)
    if argv[1] == "-m":
        sys.argv = [argv[2], *argv[3:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv[1:])
        sys.path[0] = str(Path(argv[1]).resolve().parent)
        runpy.run_path(argv[1], run_name="__main__")
    return 0


def _live_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def serve(sock: socket.socket) -> None:
    """The server's loop: fork a child per request, report each child's exit; end with the socket."""
    import importlib

    from core.kernel_cache import load_runtime

    for name in PRELOAD:
        importlib.import_module(name)
    load_runtime()
    if _live_threads() != 1:  # fork would copy a process whose other threads vanish mid-work
        raise SystemExit(f"fork server: {_live_threads()} threads after preloading; refusing to fork")
    me = os.getpid()
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([sock, *children], [], [])
        for fd in ready:
            if fd in children:
                pid = children.pop(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                _send(sock, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 1)
            if not data:  # the launcher ended: so do its roles
                for pid in children.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                return
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            pid = os.fork()
            if pid == 0:
                for child_fd in children:
                    os.close(child_fd)
                _run_child(sock, json.loads(data), fds[0], me)
            os.close(fds[0])
            children[os.pidfd_open(pid)] = pid
            _send(sock, {"started": pid})


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
