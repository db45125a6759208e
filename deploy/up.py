"""`streamrec up`: the whole system on this machine, from one YAML file.

Starts, in order: the embedded Kafka broker (unless a cluster is given), the topics, the
synthetic event generator (or a replay of a file), S parameter-server shards and W trainers
(through :class:`ps.launcher.Launcher`, like ``streamrec launch``) and the FastAPI
service. Every role runs in its own process group and logs to ``<run_dir>/logs/<role>.log``;
the roles bind loopback on free ports, the API on the configured address (127.0.0.1:8000).

Ctrl-C (or SIGTERM) asks the job to commit a final pass (``up.commit_on_exit``), then stops
the generator, the service, the trainers and shards, and the broker, and kills whatever is
left of each process group. Checkpoints and exports live under the run directory, so a
second `up` there resumes from the last committed pass.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import yaml

from core.errors import ConfigError, StreamrecError
from deploy.system_config import StreamrecConfig, resolve_root, write_role_files
from ps.launcher import Launcher, LaunchSpec, free_ports
from ps.role_process import RoleProcess
from stores.store import open_store

if TYPE_CHECKING:
    from kafka import KafkaConsumer

    from deploy.up_status import StatusCollector

_STOP_GRACE_S = 10.0
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
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


def bayes_auc(seed: int, drift: float, n: int = 200_000) -> float:
    """The best AUC any model can reach on the generator's stream (true probabilities)."""
    from streaming.generator import PlantedModel, roc_auc

    sample = PlantedModel(seed=seed, drift=drift).sample(n)
    return float(roc_auc(sample.labels, sample.prob))


def admin_token(run_dir: Path) -> str:
    """The run's admin token: kept in ``<run_dir>/admin-token`` (0600) so restarts reuse it."""
    path = run_dir / "admin-token"
    if path.is_file():
        return path.read_text().strip()
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class _StopRequested(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _StopRequested(signal.Signals(signum).name)


class LocalSystem:
    """One `up` run: start everything, show the console, stop everything."""

    def __init__(self, opts: UpOptions, *, out: IO[str] = sys.stderr) -> None:
        self.opts = opts
        self.cfg = opts.config
        self.out = out
        self.run_dir = opts.run_dir.resolve()
        self.logs = self.run_dir / "logs"
        self.roles_dir = self.run_dir / "roles"
        self.broker = None
        self.bootstrap: str | None = None
        self.roles: list[RoleProcess] = []
        self.launcher: Launcher | None = None
        self._launch_thread: threading.Thread | None = None
        self._launch_code: int | None = None
        self.api_url = f"http://{self.cfg.up.host}:{self.cfg.up.port}"
        self.token = ""
        self.control_endpoint = ""
        self.started = time.time()

    def say(self, text: str) -> None:
        print(f"streamrec up: {text}", file=self.out, flush=True)

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        # Inherited by every role (the launcher passes this process's environment on): one BLAS
        # thread per process, as W trainers and S shards already share few cores; and a tag
        # that lets anyone find this run's processes.
        for var in _THREAD_VARS:
            os.environ.setdefault(var, "1")
        os.environ[RUN_TAG_ENV] = str(self.run_dir)
        self.token = admin_token(self.run_dir)
        self._start_kafka()
        (control_port,) = free_ports(1)
        self.control_endpoint = f"tcp://127.0.0.1:{control_port}"
        self._write_configs()
        self._start_source()
        self._start_service()
        self._start_cluster()

    def _start_kafka(self) -> None:
        from streaming.connection import client_options
        from streaming.topics import ensure_topics

        servers = self.opts.kafka or ",".join(self.cfg.kafka.bootstrap_servers)
        if not servers:
            from streaming.broker import EmbeddedBroker

            self.broker = EmbeddedBroker(log_path=self.logs / "broker.log").start()
            servers = self.broker.bootstrap
            self.say(f"embedded Kafka broker at {servers}")
        self.bootstrap = servers
        kafka = self.cfg.kafka.model_copy(update={"bootstrap_servers": tuple(servers.split(","))})
        ensure_topics(kafka, client_options(kafka, list(kafka.bootstrap_servers)))

    def _effective_config(self) -> dict:
        data = self.cfg.model_dump(mode="json", by_alias=True, exclude={"service": {"admin_token"}})
        data["kafka"]["bootstrap_servers"] = (self.bootstrap or "").split(",")
        return data

    def _write_configs(self) -> None:
        """``<run_dir>/streamrec.yaml`` (the effective root config) and the role files."""
        path = self.run_dir / "streamrec.yaml"
        path.write_text(yaml.safe_dump(self._effective_config(), sort_keys=False))
        # `up` knows where its chief listens: a control file from a Kubernetes-style config is not used
        overrides = {"host": self.cfg.up.host, "port": self.cfg.up.port, "job_control": self.control_endpoint,
                     "job_control_file": None}
        kafka = {**self.cfg.kafka.model_dump(mode="json"), "bootstrap_servers": (self.bootstrap or "").split(",")}
        write_role_files(self.cfg, self.roles_dir, base=self.run_dir, overrides=overrides,
                         train_overrides={"control_endpoint": self.control_endpoint, "kafka": kafka})

    def _env(self) -> dict[str, str]:
        return {**os.environ, self.cfg.service.admin_token_env: self.token, "PYTHONUNBUFFERED": "1"}

    def _cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "deploy.cli", *args]

    def _start_role(self, name: str, argv: list[str]) -> RoleProcess:
        role = RoleProcess(name, argv, self._env(), self.logs / f"{name}.log")
        role.start()
        self.roles.append(role)
        return role

    def _start_source(self) -> None:
        config = str(self.run_dir / "streamrec.yaml")
        if self.opts.replay is not None:
            argv = self._cli("produce", "--file", str(self.opts.replay), "--format", self.opts.replay_format,
                             "--config", config, "--rate", str(self.cfg.up.generator.rate))
            self._start_role("replay", argv)
            return
        gen = self.cfg.up.generator
        argv = self._cli("generate", "--config", config, "--format", "json", "--rate", str(gen.rate),
                         "--seed", str(gen.seed), "--drift", str(gen.drift), "--skip", str(self._trained()))
        self._start_role("generator", argv)

    def _trained(self) -> int:
        """Records the last committed pass had trained on: a resumed run's generator continues
        the stream after them instead of replaying events the model already saw."""
        from trainer import checkpoints

        try:
            root = open_store(resolve_root(self.cfg.train.checkpoint_dir, self.run_dir))  # a path or a URL
            done = checkpoints.complete_passes(root)
            return int(checkpoints.read_pass(root, done[-1]).get("records_total", 0)) if done else 0
        except StreamrecError:
            return 0  # an unreadable pass: the trainers will say so; the stream starts over

    def _start_service(self) -> None:
        self._start_role("service", self._cli("serve", "--config", str(self.roles_dir / "service.yaml")))

    def _start_cluster(self) -> None:
        checkpoints = resolve_root(self.cfg.train.checkpoint_dir, self.run_dir)
        if "://" in checkpoints:  # an object store: the shards' own saves stay in the run dir
            checkpoints = str(self.run_dir / "checkpoints")
        spec = LaunchSpec(servers=self.cfg.up.shards, workers=self.cfg.up.workers,
                          command=tuple(self._cli("train", "--config", str(self.roles_dir / "train.yaml"))),
                          ps_config=self.roles_dir / "ps.yaml", log_dir=self.logs,
                          checkpoint_dir=Path(checkpoints) / "shards")
        self.launcher = Launcher(spec, out=self.out)

        def run() -> None:
            assert self.launcher is not None
            self._launch_code = self.launcher.run()

        self._launch_thread = threading.Thread(target=run, name="launcher", daemon=True)
        self._launch_thread.start()

    # ------------------------------------------------------------------ run
    def role_states(self) -> dict[str, str]:
        states = {}
        procs = list(self.roles)
        if self.launcher is not None:
            procs += self.launcher.servers + self.launcher.workers
        for role in procs:
            code = role.proc.poll() if role.proc is not None else None
            states[role.name] = "starting" if role.proc is None else ("running" if code is None else f"exited {code}")
        return states

    def failed(self) -> str | None:
        """Why the system cannot go on, or None."""
        if self._launch_thread is not None and not self._launch_thread.is_alive():
            return f"shards/trainers stopped (exit {self._launch_code}); see {self.logs}"
        for role in self.roles:
            code = role.proc.poll() if role.proc is not None else None
            if code is not None and not (role.name == "replay" and code == 0):
                return f"{role.name} exited {code}; see {role.log_path}"
        return None

    def watch(self) -> int:
        """Show the console until Ctrl-C / SIGTERM (0) or a role fails (1)."""
        from deploy.up_status import StatusCollector

        gen = self.cfg.up.generator
        bayes = bayes_auc(gen.seed, gen.drift) if self.opts.replay is None else None
        offsets = self._offsets_reader()
        collector = StatusCollector(self.api_url, self.token, self._ps_client(), bayes_auc=bayes,
                                    end_offsets=lambda: self._end_offsets(offsets))
        self.say(f"API {self.api_url}  dashboard {self.api_url}/#token={self.token}  logs {self.logs}")
        try:
            if self.opts.console and self.out.isatty():
                return self._watch_live(collector)
            return self._watch_plain(collector)
        finally:
            if collector.ps is not None:
                collector.ps.close()
            offsets.close()

    def _offsets_reader(self) -> KafkaConsumer:
        """A consumer without a group: it only reads the topic's end offsets (for the lag)."""
        from kafka import KafkaConsumer

        from streaming.connection import client_options

        kafka = self.cfg.kafka
        return KafkaConsumer(**client_options(kafka, (self.bootstrap or "").split(",")), group_id=None,
                             enable_auto_commit=False)

    def _end_offsets(self, consumer: KafkaConsumer) -> int | None:
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        try:
            parts = [TopicPartition(self.cfg.kafka.topic, p) for p in range(self.cfg.kafka.partitions)]
            return int(sum(consumer.end_offsets(parts).values()))
        except (KafkaError, OSError, ValueError):
            return None

    def _ps_client(self):  # -> PSClient | None, imported lazily
        from ps.client import PSClient
        from ps.ps_config import ClientConfig

        while self.launcher is None or not self.launcher.endpoints:
            if self._launch_thread is not None and not self._launch_thread.is_alive():
                return None  # the shards never came up: failed() says why
            time.sleep(0.1)
        return PSClient(self.launcher.endpoints, config=ClientConfig(timeout_s=1.0, retries=0))

    def _watch_live(self, collector: StatusCollector) -> int:
        from rich.console import Console
        from rich.live import Live

        from deploy.console import render

        console = Console(file=self.out)
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            while True:
                snap = collector.collect()
                snap.roles = self.role_states()
                live.update(render(snap, run_dir=str(self.run_dir), started=self.started))
                reason = self.failed()
                if reason:
                    self.say(f"failed: {reason}")
                    return 1
                time.sleep(self.cfg.up.console_refresh_s)

    def _watch_plain(self, collector: StatusCollector) -> int:
        last = 0.0
        while True:
            reason = self.failed()
            if reason:
                self.say(f"failed: {reason}")
                return 1
            if time.monotonic() - last >= 10.0:
                snap = collector.collect()
                self.say(f"records/s {snap.records_per_s} lag {snap.lag} auc {snap.auc} (bayes {snap.bayes_auc}) "
                         f"rows {snap.rows} pass {snap.last_pass} export {snap.last_export} "
                         f"freshness {snap.freshness_s}")
                last = time.monotonic()
            time.sleep(0.2)

    # ------------------------------------------------------------------ stop
    def commit_final_pass(self) -> None:
        """Commit what was trained since the last pass: on demand when the job allows it (one
        worker), else wait for the pass in progress to end on its own (passes.seconds)."""
        from core.errors import Conflict
        from jobcontrol.channel import ControlClient

        timeout = self.cfg.up.stop_timeout_s
        client = ControlClient(self.control_endpoint, timeout_s=timeout)
        try:
            try:
                result = client.call("checkpoint")
                self.say(f"final pass committed: pass {result.get('pass', result.get('pass_id'))}")
                return
            except Conflict:
                pass  # several workers: passes end together, on their clock
            before = client.call("status").get("pass", 0)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                now = client.call("status").get("pass", 0)
                if now > before:
                    self.say(f"final pass committed: pass {now}")
                    return
                time.sleep(0.2)
            self.say(f"final pass not committed within {timeout:g} s (up.stop_timeout_s)")
        except StreamrecError as err:
            self.say(f"final pass not committed: {err.message}")
        finally:
            client.close()

    def stop(self) -> None:
        """Stop every role, newest first; kill what does not stop."""
        source = [r for r in self.roles if r.name in ("generator", "replay")]
        for role in source:
            role.kill(signal.SIGTERM)
        if self.cfg.up.commit_on_exit and self._launch_thread is not None and self._launch_thread.is_alive():
            self.commit_final_pass()
        service = [r for r in self.roles if r.name == "service"]
        for role in service:
            role.kill(signal.SIGINT)  # uvicorn: graceful shutdown
        if self.launcher is not None and self._launch_thread is not None:
            self.launcher.stop()  # it stops the workers and shards itself
            self._launch_thread.join(timeout=60)
        deadline = time.monotonic() + _STOP_GRACE_S
        for role in self.roles:
            if role.proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                role.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            role.kill(signal.SIGKILL)  # the whole group: stragglers too
            with contextlib.suppress(subprocess.TimeoutExpired):
                role.proc.wait(timeout=5)
            role.close_log()
        if self.broker is not None:
            self.broker.stop()
        self.say("stopped")


def run_up(opts: UpOptions, *, out: IO[str] = sys.stderr) -> int:
    system = LocalSystem(opts, out=out)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        system.start()
        return system.watch()
    except (KeyboardInterrupt, _StopRequested):
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
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)


def options_from(config: StreamrecConfig, *, run_dir: str | None, kafka: str | None, replay: str | None,
                 replay_format: str, shards: int | None, workers: int | None, port: int | None,
                 host: str | None, rate: float | None) -> UpOptions:
    up = config.up.model_dump()
    for key, value in (("shards", shards), ("workers", workers), ("port", port), ("host", host)):
        if value is not None:
            up[key] = value
    if rate is not None:
        up["generator"] = {**up["generator"], "rate": rate}
    if replay is not None and not Path(replay).is_file():
        raise ConfigError(f"--replay {replay}: no such file")
    from core.yaml_config import validate_config

    data = config.model_dump(by_alias=True, exclude={"service": {"admin_token"}})
    data["up"] = up
    merged = validate_config(data, StreamrecConfig, "streamrec up options")
    return UpOptions(config=merged, run_dir=Path(run_dir or merged.up.run_dir), kafka=kafka,
                     replay=Path(replay).resolve() if replay else None, replay_format=replay_format)
