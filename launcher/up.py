"""`streamrec up`: the whole system on this machine, from one YAML file.

Starts, in order: the embedded Kafka broker (unless a cluster is given), the topics, the
synthetic event generator (or a replay of a file), S parameter-server shards and W trainers
(through :class:`launcher.launch.Launcher`, like ``streamrec launch``) and the FastAPI
service. Every role runs in its own process group and logs to ``<run_dir>/logs/<role>.log``;
the roles bind loopback on free ports, the API on the configured address (127.0.0.1:8000).

The shards require requests signed with a secret made for this run (``<run_dir>/ps-secret``,
0600), which the trainers and the service's read-through read (pointed at this run's shards,
whatever ``service.read_through.endpoints`` says: their ports are picked before anything
starts). Roles are supervised the way Kubernetes would (``up.restart``): one that dies is
restarted with a back-off (a restarted generator or replay goes on after what it produced,
:mod:`launcher.up_source`), and the cluster recovers through its own paths (a shard reloads
its checkpoint, trainers on leased ranks regroup from the last complete pass, the service
reloads the newest bundle).

Ctrl-C, SIGINT or SIGTERM (handlers installed explicitly, so a `up` started in the
background of a script, where SIGINT is ignored, stops the same way) asks the job to commit
a final pass (``up.commit_on_exit``), then stops the generator, the service, the trainers
(SIGTERM, and time to finish the pass's save) and shards, and the broker, and kills whatever
is left of each process group; the final pass is reported committed only once its manifest
is written and verifies. Killed outright (``kill -9``), `up` takes every role with it: each
gets the kernel's parent-death signal (:mod:`core.processes`). Checkpoints and exports live
under the run directory, so a second `up` there resumes from the last committed pass; two at
once are not allowed (a lock on the run directory names the one running there). A taken API
port fails `up` before anything starts; a dead embedded broker fails it at once (its topics
were in its memory).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from core.errors import ConfigError, Conflict, StreamrecError
from launcher.launch import LaunchSpec, free_ports, thread_limits
from launcher.system_config import StreamrecConfig, resolve_root
from launcher.up_final_pass import FinalPass
from launcher.up_kafka import TopicEnd, start_kafka, topic_ends
from launcher.up_metrics import announce, scrape_address
from launcher.up_roles import ClusterThread, UpRoles
from launcher.up_run_dir import (
    RunDir,
    RunLock,
    admin_token,
    ps_secret,
    records_trained,
    shard_checkpoints,
    write_run_configs,
)
from launcher.up_shutdown import shut_down
from launcher.up_source import bayes_auc_unless_stopped, record_source, resumed_replay, streamrec_cli
from launcher.up_stop import StopRequest, StopRequested
from launcher.up_watch import Watch, watch_live, watch_plain
from ps.auth import read_secret

if TYPE_CHECKING:
    from streaming.broker import EmbeddedBroker

log = logging.getLogger(__name__)
RUN_TAG_ENV = "STREAMREC_UP_RUN_DIR"  # set in every process `up` starts


@dataclass(frozen=True)
class UpOptions:
    """Command-line choices that override the YAML."""

    config: StreamrecConfig
    run_dir: Path
    kafka: str | None = None  # bootstrap servers of a real cluster
    replay: Path | None = None  # replay this file instead of generating events
    replay_format: str = "json"
    console: bool = True  # False: plain progress lines (no TTY, tests)


def _thread_defaults() -> dict[str, str]:
    """One compute thread per role (:func:`launcher.launch.thread_limits`) unless this shell chose
    otherwise: W trainers and S shards already share few cores."""
    return {var: value for var, value in thread_limits(1).items() if var not in os.environ}


class LocalSystem:
    """One `up` run: start everything, show the console, stop everything.

    It only coordinates; each part is its own module: the run directory and role configs
    (:mod:`launcher.up_run_dir`), Kafka (:mod:`launcher.up_kafka`), the record source
    (:mod:`launcher.up_source`), the processes (:mod:`launcher.up_roles`), the console
    (:mod:`launcher.up_watch`), the final pass and the stop (:mod:`launcher.up_shutdown`).
    """

    def __init__(self, opts: UpOptions, *, out: IO[str] = sys.stderr) -> None:
        self.opts = opts
        self.cfg = opts.config
        if self.cfg.up.port == 0:  # any free port: drawn here, so the console, the link and the roles all know it
            (port,) = free_ports(1)
            self.cfg = self.cfg.model_copy(update={"up": self.cfg.up.model_copy(update={"port": port})})
        self.out = out
        self.run = RunDir(opts.run_dir.resolve())
        self.roles = UpRoles(self.run.logs, restart=self.cfg.up.restart)
        self.broker: EmbeddedBroker | None = None  # only when `up` started it
        self.bootstrap = ""
        self.api_url = f"http://{self.cfg.up.host}:{self.cfg.up.port}"
        self.token = ""
        self.control_endpoint = ""
        self.secret_file: Path | None = None  # the run's PS secret: shards and the chief's job control
        self.lock: RunLock | None = None  # held from the start to the end of the stop
        self.started = time.time()

    def say(self, text: str) -> None:
        print(f"streamrec up: {text}", file=self.out, flush=True)
        log.info(text)  # the console's lines stay in up's log too

    def start(self) -> None:
        """Broker and topics, the run's configs, then the source, the service and the cluster."""
        self.run.logs.mkdir(parents=True, exist_ok=True)
        self.lock = RunLock(self.run.root)  # before anything in the directory changes: a second `up` is refused
        api_port_free(self.cfg.up.host, self.cfg.up.port)
        # A tag that lets anyone find this run's processes: set here, not per role, because the
        # embedded broker takes this process's environment as it is.
        os.environ[RUN_TAG_ENV] = str(self.run.root)
        self.token = admin_token(self.run.root)
        secret = self.secret_file = ps_secret(self.run.root)
        api_port = (self.cfg.up.port,) if self.cfg.up.port else ()  # the service binds it last
        self.broker, self.bootstrap = start_kafka(self.cfg, servers=self.opts.kafka, log_path=self.run.log("broker"),
                                                  say=self.say, avoid_ports=api_port)
        self.roles.broker = self.broker  # watched like every role (launcher.up_roles)
        (control_port,) = free_ports(1, avoid=api_port)
        self.control_endpoint = f"tcp://127.0.0.1:{control_port}"
        train = streamrec_cli("train", "--config", str(self.run.roles / "train.yaml"))
        # planned first: the shards' ports go into the service's read-through (service.read_through)
        cluster = self.roles.plan(LaunchSpec(
            servers=self.cfg.up.shards, workers=self.cfg.up.workers, command=tuple(train),
            ps_config=self.run.roles / "ps.yaml", log_dir=self.run.logs,
            checkpoint_dir=shard_checkpoints(self.cfg, self.run.root), env=_thread_defaults(), secret_file=secret,
            restart=self.cfg.up.restart, rank_lease_ttl_s=self.cfg.up.rank_lease_ttl_s,
            stop_grace_s=self.cfg.up.stop_timeout_s, metrics_ports=True,
            reserved_ports=(*api_port, control_port), start_method=self.cfg.up.start_method), out=self.out)
        self.say(announce(self.run.root, self._metrics_addresses(cluster)))
        cluster.launcher.on_replan = lambda: self._shards_moved(cluster)
        replay_done: dict[int, int] = {}
        if self.opts.replay is not None and self.broker is not None:  # a new log: it starts after what was trained
            self.cfg, replay_done = resumed_replay(self.cfg, self.run.root)
            if replay_done:
                self.say(f"the replay resumes after the {sum(replay_done.values())} lines the last pass trained")
            self._check_dense_inputs(self.opts.replay)
        write_run_configs(self.cfg, self.run, bootstrap=self.bootstrap, control_endpoint=self.control_endpoint,
                          secret_file=secret, shard_endpoints=cluster.shard_endpoints)
        env = {**os.environ, **_thread_defaults(), self.cfg.service.admin_token_env: self.token,
               "PYTHONUNBUFFERED": "1"}
        skip = records_trained(self.cfg, self.run.root) if self.opts.replay is None else 0
        source = record_source(self.cfg, config=self.run.config, replay=self.opts.replay,
                               replay_format=self.opts.replay_format, skip=skip,
                               since=topic_ends(self.cfg, self.bootstrap), replay_done=replay_done)
        self.roles.start(source.name, source.argv, env=env)
        self.roles.start("service", streamrec_cli("serve", "--config", str(self.run.roles / "service.yaml")), env=env,
                         port=self.cfg.up.port or None)
        self.roles.launch()

    def _shards_moved(self, cluster: ClusterThread) -> None:
        """The shards start again on other ports (and /metrics ports): the Prometheus targets follow,
        and so does the service's read-through, rewritten and started again (it reads it at start)."""
        self.say(announce(self.run.root, self._metrics_addresses(cluster)))
        if self.cfg.service.read_through is not None:
            assert self.secret_file is not None
            write_run_configs(self.cfg, self.run, bootstrap=self.bootstrap, control_endpoint=self.control_endpoint,
                              secret_file=self.secret_file, shard_endpoints=cluster.shard_endpoints)
            self.roles.renew("service", "its read-through follows the shards to "
                             + ",".join(cluster.shard_endpoints))

    def _check_dense_inputs(self, replay: Path) -> None:
        """Warn about a dense field of the replayed file that the model cannot tell apart (a raw timestamp)."""
        from models.dense_inputs import dense_warnings

        try:
            warnings = dense_warnings(self.cfg.schema_, dense_log1p=self.cfg.train.model.dense_log1p, path=replay)
        except StreamrecError as err:  # the replay itself refuses such a file, saying why
            self.say(f"warning: the dense fields of {replay} were not checked: {err}")
            return
        for warning in warnings:
            self.say(f"warning: {warning}")

    def _metrics_addresses(self, cluster: ClusterThread) -> dict[str, str]:
        """Role name -> where its /metrics is: shards and trainers on the ports `up` picked, the service
        on its API port."""
        launcher = cluster.launcher
        out = {name: scrape_address(launcher.spec.host, port) for name, port in launcher.metrics_ports.items()}
        if self.cfg.up.port:
            out["service"] = scrape_address(self.cfg.up.host, self.cfg.up.port)
        return out

    def watch(self, stop: StopRequest) -> int:
        """Show the console until ``stop`` is asked for (Ctrl-C / SIGTERM: 0) or a role fails (1)."""
        from launcher.up_status import StatusCollector

        gen = self.cfg.up.generator
        bayes = bayes_auc_unless_stopped(gen.seed, gen.drift, lambda: stop.asked) if self.opts.replay is None else None
        topic_end = TopicEnd(self.cfg, self.bootstrap)
        shards = self.roles.cluster.shard_client() if self.roles.cluster is not None else None
        collector = StatusCollector(self.api_url, self.token, shards, bayes_auc=bayes, end_offsets=topic_end)
        # the generator's Bayes-optimal AUC rides in the link too: the dashboard draws it as the console does
        link = f"{self.api_url}/#token={self.token}" + (f"&bayes_auc={bayes:.4f}" if bayes is not None else "")
        self.say(f"API {self.api_url}  dashboard {link}  logs {self.run.logs}")
        try:
            watch = Watch(self.roles, collector, self.out, self.say, stop)
            if self.opts.console and self.out.isatty():
                return watch_live(watch, run_dir=str(self.run.root), started=self.started,
                                  refresh_s=self.cfg.up.console_refresh_s)
            return watch_plain(watch)
        finally:
            if collector.ps is not None:
                collector.ps.close()
            topic_end.close()

    def stop(self) -> None:
        """Stop every role, upstream first, committing a final pass on the way (if configured)."""
        final_pass = None
        if self.cfg.up.commit_on_exit and self.control_endpoint:
            root = resolve_root(self.cfg.train.checkpoint_dir, self.run.root)
            final_pass = FinalPass(self.control_endpoint, root=root, timeout_s=self.cfg.up.stop_timeout_s,
                                   say=self.say, secret=read_secret(self.secret_file) if self.secret_file else None)
        try:
            shut_down(self.roles, final_pass=final_pass, broker=self.broker, say=self.say)
        finally:
            if self.lock is not None:
                self.lock.release()


def api_port_free(host: str, port: int) -> None:
    """Refuse a taken API port before anything starts (the service would only fail to bind it, again
    at every restart); bound as uvicorn binds, so a port in TIME_WAIT counts as free. Port 0: any."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise Conflict(f"port {port} is in use on {host}: another process listens there; stop it or give "
                               f"`up` another --port (up.port)") from None
            raise ConfigError(f"the API cannot listen on {host}:{port} (up.host, up.port): {exc.strerror}") from None


def run_up(opts: UpOptions, *, out: IO[str] = sys.stderr) -> int:
    system = LocalSystem(opts, out=out)
    # Both installed explicitly: a shell starts a background job with SIGINT ignored, and
    # Python then leaves it ignored instead of raising KeyboardInterrupt.
    stop = StopRequest()
    previous = {sig: signal.signal(sig, stop.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        system.start()
        stop.deferred = True  # from here the watch loop waits on the request (launcher.up_stop)
        code = system.watch(stop)
        if stop.asked:
            system.say("stopping")
            return 0
        return code
    except (KeyboardInterrupt, StopRequested):
        system.say("stopping")
        return 0
    except StreamrecError as err:
        system.say(f"failed: {err.message}")
        return 1
    finally:
        # A second Ctrl-C during shutdown must not leave processes behind: ignore it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            system.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def options_from(config: StreamrecConfig, *, run_dir: str | None, kafka: str | None, replay: str | None,
                 replay_format: str, shards: int | None, workers: int | None, port: int | None,
                 host: str | None, rate: float | None, replay_rate: float | None = None) -> UpOptions:
    up = config.up.model_dump()
    for key, value in (("shards", shards), ("workers", workers), ("port", port), ("host", host)):
        if value is not None:
            up[key] = value
    if rate is not None:
        up["generator"] = {**up["generator"], "rate": rate}
    if replay_rate is not None:
        up["replay"] = {**up["replay"], "rate": replay_rate}
    if replay is not None and not Path(replay).is_file():
        raise ConfigError(f"--replay {replay}: no such file")
    from core.yaml_config import validate_config

    data = config.model_dump(by_alias=True, exclude={"service": {"admin_token"}})
    data["up"] = up
    merged = validate_config(data, StreamrecConfig, "streamrec up options")
    return UpOptions(config=merged, run_dir=Path(run_dir or merged.up.run_dir), kafka=kafka,
                     replay=Path(replay).resolve() if replay else None, replay_format=replay_format)
