"""``streamrec generate``: planted synthetic click data, into a topic or a file, with its Bayes AUC."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logrecords.generator import PlantedModel
    from streaming.kafka_config import KafkaConfig
    from streaming.producer import StreamOnTopic

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate", help="synthetic events from a planted model (known Bayes-optimal AUC), to a topic or a file"
    )
    p.add_argument("--out", help="write a file here instead of producing to Kafka")
    p.add_argument("--rows", type=int, help="number of records (required with --out; default: until Ctrl-C)")
    p.add_argument("--format", choices=["criteo", "json"], default="criteo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drift", type=float, default=0.0, help="hidden-weight rotation, radians per million events")
    p.add_argument("--rate", type=float, help="records per second when producing (default: as fast as possible)")
    p.add_argument("--skip", type=int, default=0,
                   help="draw and drop this many events first: a resumed stream goes on (clock, drift) "
                        "instead of replaying the events already produced")
    p.add_argument("--topic", help="target topic (default: kafka.topic of the config)")
    p.add_argument("--config", help="YAML file with a 'kafka:' section")
    p.add_argument("--bootstrap", help="host:port[,host:port] of the Kafka cluster (overrides the config)")
    p.add_argument("--since-offsets", metavar="P:O,...",
                   help="the topic's end offsets when this stream first started: event i goes to partition i %% P, "
                        "and a restart (after a kill -9 too) goes on after the events already on the topic "
                        "(on top of --skip), so none is sent twice or lost")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import ConfigError
    from logrecords.generator import PlantedModel

    on_topic = None
    if args.since_offsets:
        if args.out:
            raise ConfigError("--since-offsets is for a topic, not --out")
        on_topic = _on_topic(args)
    first = 0 if on_topic is None else on_topic.first_missing()  # this stream's events before it are on the topic
    skip = max(0, args.skip)
    # A live stream at a fixed rate carries wall-clock event times, so serving freshness
    # (now - newest event time of a bundle) is meaningful for generated data too.
    live = args.rate and not args.out  # the first event after the skipped ones happens now
    clock = {"start_time": time.time() - (skip + first) / args.rate, "events_per_second": args.rate} if live else {}
    model = PlantedModel(seed=args.seed, drift=args.drift, **clock)
    for start in range(0, skip, 100_000):  # in chunks: bounded memory
        model.sample(min(100_000, skip - start))
    # A restart draws what the stream drew before, chunk by chunk as it did, so it goes on with the
    # very events the killed one would have produced (those on the topic are dropped, not sent).
    chunk = _chunk(args)
    aligned = first - first % chunk
    for _ in range(aligned // chunk):
        model.sample(chunk)
    if args.out:
        if not args.rows or args.rows < 1:
            raise ConfigError("--out needs --rows N (N >= 1)")
        from logrecords.sample_encoding import write_dataset

        start = time.monotonic()
        stats = write_dataset(args.out, model, args.rows, fmt=args.format)
        stats["seconds"] = round(time.monotonic() - start, 2)
        print(json.dumps({"out": args.out, "format": args.format, "seed": args.seed, **stats}))
        return 0
    return _to_kafka(args, model, on_topic, aligned)


def _chunk(args: argparse.Namespace) -> int:
    """Events drawn at once: a second's worth at a fixed rate, else 10,000."""
    return 10_000 if args.rate is None else max(1, min(10_000, int(args.rate)))


def _on_topic(args: argparse.Namespace) -> StreamOnTopic:
    """Which events of this stream are on the topic already (``--since-offsets``)."""
    from core.errors import ConfigError
    from streaming.connection import client_options
    from streaming.kafka_config import load_kafka_config
    from streaming.producer import StreamOnTopic, parse_offsets
    from streaming.topics import ensure_topics

    bootstrap = args.bootstrap.split(",") if args.bootstrap else None
    config = load_kafka_config(args.config, bootstrap_servers=bootstrap, topic=args.topic)
    if not config.bootstrap_servers:
        raise ConfigError("--since-offsets needs a Kafka cluster (kafka.bootstrap_servers or --bootstrap)")
    since = parse_offsets(args.since_offsets)
    if len(since) != config.partitions:
        raise ConfigError(f"--since-offsets names {len(since)} partitions, the topic has {config.partitions}")
    options = client_options(config, list(config.bootstrap_servers))
    ensure_topics(config, options)
    return StreamOnTopic.read(options, config.topic, since)


def _to_kafka(args: argparse.Namespace, model: PlantedModel, on_topic: StreamOnTopic | None, first: int) -> int:
    from core.errors import ConfigError
    from streaming.broker import bootstrap_servers
    from streaming.connection import client_options
    from streaming.kafka_config import load_kafka_config

    bootstrap = args.bootstrap.split(",") if args.bootstrap else None
    config = load_kafka_config(args.config, bootstrap_servers=bootstrap, topic=args.topic)
    if not config.bootstrap_servers and args.rows is not None:
        raise ConfigError("generate --rows needs a Kafka cluster (kafka.bootstrap_servers or --bootstrap) or --out "
                          "PATH: an embedded broker would vanish with the data when generate exits")
    with bootstrap_servers(config) as servers:
        if not config.bootstrap_servers:
            # Open-ended stream without a cluster: serve it from an embedded broker until Ctrl-C.
            print(f"embedded broker at {servers[0]} (stops with this command)", file=sys.stderr, flush=True)
        report = _stream(args, model, config, client_options(config, servers), on_topic, first)
    print(json.dumps(report))
    return 0


def _stream(args: argparse.Namespace, model: PlantedModel, config: KafkaConfig, options: dict[str, Any],
            on_topic: StreamOnTopic | None, first: int) -> dict:
    """Produce until stopped (or ``--rows``); with ``on_topic`` event ``i`` (from ``first``) goes to
    partition ``i % P`` unless it is on the topic already."""
    import numpy as np

    from logrecords.generator import roc_auc
    from logrecords.sample_encoding import criteo_lines, json_lines
    from streaming.producer import RecordProducer
    from streaming.topics import ensure_topics

    ensure_topics(config, options)
    log.info("producing %s records to topic %s at %s records/s from event %d of seed %d", args.rows or "unbounded",
             config.topic, args.rate or "full speed", args.skip + first, args.seed)
    encode = criteo_lines if args.format == "criteo" else json_lines
    chunk = _chunk(args)
    labels: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    index = first  # of the next event drawn, in this stream (after --skip)
    with RecordProducer(config, options, ordered=on_topic is not None) as producer:
        try:
            while args.rows is None or producer.sent < args.rows:
                sample = model.sample(chunk if args.rows is None else min(chunk, args.rows - producer.sent))
                lines = encode(sample)
                if on_topic is None:
                    keep, partitions = np.ones(len(sample), dtype=bool), None
                else:
                    keep = on_topic.missing(index, len(sample))
                    lines = [line for line, k in zip(lines, keep, strict=True) if k]
                    partitions = (np.arange(index, index + len(sample))[keep] % on_topic.partitions).tolist()
                index += len(sample)
                labels.append(sample.labels[keep])
                probs.append(sample.prob[keep])
                producer.send_all(lines, rate=args.rate, partitions=partitions)
        except KeyboardInterrupt:
            pass  # Ctrl-C ends an open-ended stream; report what was sent
        sent = producer.sent
    y = np.concatenate(labels)[:sent] if labels else np.zeros(0)
    auc = roc_auc(y, np.concatenate(probs)[:sent]) if 0 < y.sum() < y.size else None
    return {"topic": config.topic, "records": sent, "ctr": float(y.mean()) if y.size else None, "bayes_auc": auc}
