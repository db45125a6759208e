"""Where the records of `streamrec up` come from: the synthetic event generator (planted model,
fixed rate) or the replay of a file, each a ``streamrec`` subcommand run as a role.

A replay ends when the file does (exit 0 is not a failure); the generator runs until stopped.
A resumed generator skips the events the last committed pass trained on, so the model does not
see them twice. Both are given the topic's end offsets when the run started (``--since-offsets``):
a source restarted by the supervisor (after a kill -9 too) goes on after what it already put on
the topic, so no record is produced twice or lost (:mod:`streaming.producer`). A replay resumed
on a new embedded broker (its log was in the old one's memory) leaves out the lines the last
committed pass trained, per partition (:func:`replay_resume`), and the trainers count the new
log's offsets after them (``kafka.log_base``): each line is trained once over the runs.

The generator produces at ``up.generator.rate``. The replay, by default, as fast as the trainers
take it: it pauses while the consumer group lags by more than ``up.replay.max_lag`` records
(:mod:`streaming.backpressure`); ``up.replay.rate`` caps its rate as well.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import StreamrecError
from launcher.system_config import StreamrecConfig, resolve_root
from streaming.producer import format_offsets

SOURCE_ROLES = ("generator", "replay")  # the role names a source runs under


def streamrec_cli(*args: str) -> list[str]:
    """The argv of a ``streamrec`` subcommand run by this Python."""
    return [sys.executable, "-m", "cli", *args]


@dataclass(frozen=True)
class RecordSource:
    """The role that feeds the topic: its name (one of :data:`SOURCE_ROLES`) and command."""

    name: str
    argv: list[str]


def replay_max_lag(cfg: StreamrecConfig) -> int:
    """``up.replay.max_lag``, by default four polls per trainer."""
    return cfg.up.replay.max_lag or 4 * cfg.kafka.batch_size * cfg.up.workers


def replay_resume(cfg: StreamrecConfig, run_dir: Path) -> dict[int, int]:
    """Per partition, the lines of a replay the newest committed pass trained (line ``i`` is in
    partition ``i % P``; a pass's offsets count the stream from its start). Empty when no pass
    was committed or it read partitions the topic has no longer: its lines were placed otherwise."""
    from stores.store import open_store
    from trainer.recovery import newest_usable_pass

    try:
        found = newest_usable_pass(open_store(resolve_root(cfg.train.checkpoint_dir, run_dir)))
    except StreamrecError:
        return {}  # an unreadable pass: the trainers will say so
    offsets = {} if found is None else {int(p): int(o) for p, o in found[1].get("offsets", {}).items()}
    if not any(offsets.values()) or not set(offsets) <= set(range(cfg.kafka.partitions)):
        return {}
    return {p: offsets.get(p, 0) for p in range(cfg.kafka.partitions)}


def resumed_replay(cfg: StreamrecConfig, run_dir: Path) -> tuple[StreamrecConfig, dict[int, int]]:
    """``cfg`` with the trainers' ``kafka.log_base`` set to what the last pass trained of a replay
    that resumes on a new embedded broker, and those per-partition counts (the lines to leave out)."""
    done = replay_resume(cfg, run_dir)
    if not done:
        return cfg, {}
    return cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"log_base": done})}), done


def record_source(cfg: StreamrecConfig, *, config: Path, replay: Path | None, replay_format: str,
                  skip: int, since: dict[int, int], replay_done: dict[int, int] | None = None) -> RecordSource:
    """The replay of ``replay`` when given (without the lines ``replay_done`` counts per partition),
    else the generator resuming after ``skip`` events; both read the Kafka settings from the root
    ``config`` file and go on after what they put on the topic since its end offsets were ``since``
    (module docstring)."""
    gen = cfg.up.generator
    offsets = format_offsets(since)
    if replay is not None:
        rate = () if cfg.up.replay.rate is None else ("--rate", str(cfg.up.replay.rate))
        done = ("--skip-offsets", format_offsets(replay_done)) if replay_done else ()
        return RecordSource("replay", streamrec_cli("produce", "--file", str(replay), "--format", replay_format,
                                                    "--config", str(config), *rate,
                                                    "--max-lag", str(replay_max_lag(cfg)),
                                                    "--since-offsets", offsets, *done))
    return RecordSource("generator", streamrec_cli("generate", "--config", str(config), "--format", "json",
                                                   "--rate", str(gen.rate), "--seed", str(gen.seed),
                                                   "--drift", str(gen.drift), "--skip", str(skip),
                                                   "--since-offsets", offsets))


def bayes_auc(seed: int, drift: float, n: int = 200_000) -> float:
    """The best AUC any model can reach on the generator's stream (true probabilities)."""
    from logrecords.generator import PlantedModel, roc_auc

    sample = PlantedModel(seed=seed, drift=drift).sample(n)
    return float(roc_auc(sample.labels, sample.prob))


def bayes_auc_unless_stopped(seed: int, drift: float, stopped: Callable[[], bool]) -> float | None:
    """:func:`bayes_auc`, or None once ``stopped()`` says a stop was asked for first: on a busy
    machine the sample takes seconds that a Ctrl-C must not wait for."""
    result: list[float] = []
    worker = threading.Thread(target=lambda: result.append(bayes_auc(seed, drift)), name="bayes-auc", daemon=True)
    worker.start()
    while worker.is_alive() and not stopped():
        worker.join(0.1)
    return result[0] if result else None
