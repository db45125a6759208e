"""Where the records of `streamrec up` come from: the synthetic event generator (planted model,
fixed rate) or the replay of a file, each a ``streamrec`` subcommand run as a role.

A replay ends when the file does (exit 0 is not a failure); the generator runs until stopped.
A resumed generator skips the events the last committed pass trained on, so the model does not
see them twice.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from deploy.system_config import StreamrecConfig

SOURCE_ROLES = ("generator", "replay")  # the role names a source runs under


def streamrec_cli(*args: str) -> list[str]:
    """The argv of a ``streamrec`` subcommand run by this Python."""
    return [sys.executable, "-m", "deploy.cli", *args]


@dataclass(frozen=True)
class RecordSource:
    """The role that feeds the topic: its name (one of :data:`SOURCE_ROLES`) and command."""

    name: str
    argv: list[str]


def record_source(cfg: StreamrecConfig, *, config: Path, replay: Path | None, replay_format: str,
                  skip: int) -> RecordSource:
    """The replay of ``replay`` when given, else the generator resuming after ``skip`` events;
    both read the Kafka settings from the root ``config`` file and produce at ``up.generator.rate``."""
    gen = cfg.up.generator
    if replay is not None:
        return RecordSource("replay", streamrec_cli("produce", "--file", str(replay), "--format", replay_format,
                                                    "--config", str(config), "--rate", str(gen.rate)))
    return RecordSource("generator", streamrec_cli("generate", "--config", str(config), "--format", "json",
                                                   "--rate", str(gen.rate), "--seed", str(gen.seed),
                                                   "--drift", str(gen.drift), "--skip", str(skip)))


def bayes_auc(seed: int, drift: float, n: int = 200_000) -> float:
    """The best AUC any model can reach on the generator's stream (true probabilities)."""
    from streaming.generator import PlantedModel, roc_auc

    sample = PlantedModel(seed=seed, drift=drift).sample(n)
    return float(roc_auc(sample.labels, sample.prob))
