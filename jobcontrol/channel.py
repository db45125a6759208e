"""Job control: how the REST admin API operates a running training job.

The chief trainer (rank 0) serves a ZeroMQ REP socket; a request is one JSON object
``{"op": NAME, "args": {...}}`` and the reply is ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": {"code", "message", "detail"}}`` (codes from core.errors, so the
service maps them to HTTP statuses with its one handler). Ops and their handler methods:

  status() -> dict              passes() -> list[dict]         checkpoint() -> dict
  export() -> dict              shrink() -> dict               rollback(pass_id: int) -> dict
  pause() -> dict               resume() -> dict
  get_policy(table: str) -> dict  history(since: int = -1) -> dict (the learning curve after pass ``since``)
  put_policy(table: str, admission: dict | None, eviction: dict | None, dry_run: bool) -> dict

The handler is any object with those methods (the trainer's job). The server answers from
its own thread; handlers must be thread-safe. No pickle: JSON only, bounded request size.

With a secret (the cluster's, the one the PS shards use) every request is signed like a PS
request (:mod:`ps.auth`: timestamp + HMAC in a second frame, replays refused) under its own
identity label, so a captured PS request is no control request. A server off loopback
refuses to start without a secret: whoever reaches the socket could pause, roll back or
shrink the job.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

import zmq

from core.errors import InvalidInput, StreamrecError, Unavailable, error_from_code
from ps.auth import Verifier, require_auth_for, sign

CONTROL_FILE = "control.json"  # under the checkpoint root: {"endpoint", "rank"} of the chief's control server
OPS = ("status", "passes", "checkpoint", "export", "shrink", "rollback", "pause", "resume", "get_policy",
       "put_policy", "history")
MAX_REQUEST_BYTES = 1 << 20
CONTROL_IDENTITY = b"streamrec-job-control"  # signed under this label: a PS request's MAC is no control MAC


class JobHandler(Protocol):
    def status(self) -> dict[str, Any]: ...
    def passes(self) -> list[dict[str, Any]]: ...
    def checkpoint(self) -> dict[str, Any]: ...
    def export(self) -> dict[str, Any]: ...
    def shrink(self) -> dict[str, Any]: ...
    def rollback(self, pass_id: int) -> dict[str, Any]: ...
    def pause(self) -> dict[str, Any]: ...
    def resume(self) -> dict[str, Any]: ...
    def get_policy(self, table: str) -> dict[str, Any]: ...
    def history(self, since: int = -1) -> dict[str, Any]: ...
    def put_policy(self, table: str, admission: dict | None, eviction: dict | None,
                   dry_run: bool) -> dict[str, Any]: ...


class ControlServer:
    """Serves ``handler`` on ``endpoint`` (e.g. tcp://127.0.0.1:0; ``endpoint`` after start is the bound one)."""

    def __init__(self, handler: JobHandler, endpoint: str = "tcp://127.0.0.1:0", *,
                 secret: bytes | None = None) -> None:
        require_auth_for(endpoint, secret)
        self.handler = handler
        self._verifier = Verifier(secret) if secret is not None else None
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        self._sock.bind(endpoint)
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="job-control", daemon=True)

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            frames = self._sock.recv_multipart()
            self._sock.send(json.dumps(self._answer(frames), default=str).encode())
        self._sock.close()

    def _answer(self, frames: list[bytes]) -> dict[str, Any]:
        try:
            if self._verifier is not None:
                self._verifier.verify(frames, has_tag=len(frames) == 2, identity=CONTROL_IDENTITY)
            elif len(frames) != 1:
                raise InvalidInput("control request must be one frame (this job control takes unsigned requests)")
            req = json.loads(frames[0])
            if not isinstance(req, dict) or req.get("op") not in OPS or not isinstance(req.get("args", {}), dict):
                raise InvalidInput(f"control request must be {{op: one of {list(OPS)}, args: object}}")
            result = getattr(self.handler, req["op"])(**req.get("args", {}))
            return {"ok": True, "result": result}
        except StreamrecError as err:
            return {"ok": False, "error": err.to_dict()}
        except (ValueError, TypeError) as exc:
            return {"ok": False, "error": InvalidInput(f"bad control request: {exc}").to_dict()}
        except RecursionError:
            return {"ok": False, "error": InvalidInput("bad control request: JSON nested too deeply").to_dict()}
        except Exception as exc:  # the server thread must outlive any request: one bad call, one error reply
            return {"ok": False, "error": StreamrecError(f"control op failed: {type(exc).__name__}: {exc}").to_dict()}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        elif self._thread.ident is None:  # never started: the serving thread would have closed it
            self._sock.close()


def advertised_endpoint(bound: str, host: str | None) -> str:
    """``bound`` (e.g. ``tcp://0.0.0.0:7100``) as others reach it: its host replaced by ``host``
    (STREAMREC_ADVERTISE_HOST, the pod IP on Kubernetes) when one is given."""
    if host is None:
        return bound
    scheme, _, rest = bound.partition("://")
    port = rest.rsplit(":", 1)[1]
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class ControlClient:
    """Calls a job's control server; raises the job's errors as core.errors classes."""

    def __init__(self, endpoint: str, *, timeout_s: float = 30.0, secret: bytes | None = None) -> None:
        self.endpoint = endpoint
        self._secret = secret
        self.timeout_ms = int(timeout_s * 1000)
        self._ctx = zmq.Context.instance()
        self._lock = threading.Lock()
        self._sock: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            s = self._ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
            s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
            s.connect(self.endpoint)
            self._sock = s
        return self._sock

    def call(self, op: str, **args: Any) -> Any:
        with self._lock:
            sock = self._socket()
            try:
                payload = json.dumps({"op": op, "args": args}).encode()
                if self._secret is None:
                    sock.send(payload)
                else:
                    sock.send_multipart([payload, sign(self._secret, [payload], identity=CONTROL_IDENTITY)])
                reply = json.loads(sock.recv())
            except zmq.Again:
                sock.close()  # a REQ socket that timed out is unusable: start over next time
                self._sock = None
                raise Unavailable(f"training job at {self.endpoint} did not answer {op!r} in time") from None
        if reply.get("ok"):
            return reply.get("result")
        e = reply.get("error", {})
        raise error_from_code(e.get("code", "internal_error"), e.get("message", "job error"), e.get("detail"))

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
