"""``streamrec produce``: replay a Criteo TSV or JSON-lines file into a Kafka topic.

``--max-lag N`` paces the replay by the trainers (:mod:`streaming.backpressure`): it pauses
while more than N records on the topic lie past the consumer group's committed offsets.
``--since-offsets`` makes a restart go on where the replay stopped (:mod:`streaming.producer`):
line ``i`` goes to partition ``i % P`` and a restarted replay sends only the lines not yet on
the topic. ``--skip-offsets`` leaves out, per partition, the lines a committed pass already
trained (a replay resumed on a new log). A line over what one produce request carries is
refused with a message naming it and sent cut, so that the consumers dead-letter it; the rest
go on (:mod:`streaming.producer`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.backpressure import GroupLag, LagGate
    from streaming.kafka_config import KafkaConfig
    from streaming.producer import RecordProducer, StreamOnTopic


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("produce", help="replay a data file into a Kafka topic (batched, compressed)")
    p.add_argument("--file", required=True, help="Criteo TSV or JSON-lines file (.gz allowed)")
    p.add_argument("--format", choices=["criteo", "json"], required=True)
    p.add_argument("--topic", help="target topic (default: kafka.topic of the config)")
    p.add_argument("--rate", type=float, help="at most this many records per second")
    p.add_argument("--config", help="YAML file with a 'kafka:' section")
    p.add_argument("--bootstrap", help="host:port[,host:port] of the Kafka cluster (overrides the config)")
    p.add_argument("--max-lag", type=int, metavar="N",
                   help="pause while more than N records lie past the consumer group's committed offsets")
    p.add_argument("--group", help="the consumer group --max-lag watches (default: kafka.group_id of the config)")
    p.add_argument("--since-offsets", metavar="P:O,...",
                   help="the topic's end offsets when this replay first started: line i goes to partition i %% P "
                        "and a restart sends only the lines not yet on the topic")
    p.add_argument("--skip-offsets", metavar="P:N,...",
                   help="with --since-offsets: leave out the first N lines of partition P's share (line i is "
                        "partition P's line i // P), e.g. those a committed pass already trained")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import ConfigError
    from logrecords.criteo import CriteoParser
    from logrecords.schema_config import SchemaConfig
    from streaming.connection import client_options
    from streaming.kafka_config import load_kafka_config
    from streaming.producer import RecordProducer, StreamOnTopic, numbered_lines, parse_offsets
    from streaming.topics import ensure_topics

    bootstrap = args.bootstrap.split(",") if args.bootstrap else None
    config = load_kafka_config(args.config, bootstrap_servers=bootstrap, topic=args.topic)
    if not config.bootstrap_servers:
        raise ConfigError("produce needs a Kafka cluster: set kafka.bootstrap_servers or pass --bootstrap "
                          "(the embedded broker lives only as long as the streamrec process that started it)")
    options = client_options(config, list(config.bootstrap_servers))
    ensure_topics(config, options)
    if args.max_lag is not None and args.max_lag < 1:
        raise ConfigError("--max-lag must be at least 1")
    on_topic = None
    if args.since_offsets:
        since = parse_offsets(args.since_offsets)
        if len(since) != config.partitions:
            raise ConfigError(f"--since-offsets names {len(since)} partitions, the topic has {config.partitions}")
        on_topic = StreamOnTopic.read(options, config.topic, since)
    skip = parse_offsets(args.skip_offsets) if args.skip_offsets else {}
    if skip and (on_topic is None or len(skip) != on_topic.partitions):
        raise ConfigError("--skip-offsets needs --since-offsets, with as many partitions")
    # Lines are checked with the parser on the way, so a wrong --format shows up at once.
    rejected: Counter[str] = Counter()
    if args.format == "criteo":
        parser = CriteoParser(max_message_bytes=config.max_message_bytes)
    else:
        from logrecords.json_lines import JsonLinesParser

        parser = JsonLinesParser(SchemaConfig(), max_message_bytes=config.max_message_bytes)

    numbers: dict[int, int] = {}  # position among the lines sent -> line number, for the lines too long to send

    def unsent() -> Iterator[tuple[bytes, int | None]]:  # (line, its partition) of the lines to send
        position = 0
        for i, (number, line) in enumerate(numbered_lines(args.file)):
            part = None
            if on_topic is not None:
                part = i % on_topic.partitions
                if i // on_topic.partitions < skip.get(part, 0) + on_topic.present[part]:
                    continue
            if len(line) > too_long:
                numbers[position] = number
            position += 1
            yield line, part

    def refused(index: int, size: int) -> None:
        print(f"line {numbers.get(index, '?')} of {args.file} is {size} bytes, over the {too_long} a Kafka request "
              f"carries: refused, sent cut to {config.max_message_bytes + 1} bytes so that the consumers "
              "dead-letter it as oversized; the other lines go on", file=sys.stderr, flush=True)

    lines, placed = itertools.tee(unsent())

    def checked() -> Iterator[bytes]:
        chunk: list[bytes] = []
        for line, _ in lines:
            chunk.append(line)
            if len(chunk) == 4096:
                yield from _check(chunk)
                chunk = []
        yield from _check(chunk)

    def _check(chunk: list[bytes]) -> list[bytes]:
        if chunk and args.format == "criteo":
            for r in parser.parse(chunk)[1]:
                rejected[r.reason.label] += 1
        elif chunk:
            # JSON records follow no fixed schema here: only check that each line is a JSON object.
            for r in parser.parse(chunk)[1]:
                if r.reason.label in ("invalid_json", "oversized"):
                    rejected[r.reason.label] += 1
        return chunk

    resumed = (0 if on_topic is None else sum(on_topic.present)) + sum(skip.values())
    with RecordProducer(config, options, ordered=on_topic is not None) as producer:
        too_long = producer.max_record_bytes
        gate, lag = _gate(args, config, options, on_topic, producer)
        # the lag stays below max_lag plus one chunk: a quarter of it between two reads
        chunk = 1000 if args.max_lag is None else max(1, min(1000, args.max_lag // 4))
        sent = producer.send_all(checked(), rate=args.rate, partitions=(p for _, p in placed), chunk_size=chunk,
                                 before_chunk=None if gate is None else lambda: gate.wait(producer.sent),
                                 on_refused=refused)
        if lag is not None:
            lag.close()
    more = f" ({resumed} were on the topic or trained already)" if resumed else ""
    paced = f"; paused {gate.pauses} times, highest lag {gate.highest}" if gate is not None else ""
    cut = f"; {producer.refused} lines too long were sent cut (see above)" if producer.refused else ""
    print(f"produced {sent} records from {args.file} into '{config.topic}'{more}{paced}{cut}", flush=True)
    if rejected:
        print(f"note: {sum(rejected.values())} of them will be dead-lettered by consumers: {dict(rejected)}",
              file=sys.stderr)
    return 0


def _gate(args: argparse.Namespace, config: KafkaConfig, options: dict[str, Any], on_topic: StreamOnTopic | None,
          producer: RecordProducer) -> tuple[LagGate | None, GroupLag | None]:
    """The back-pressure of ``--max-lag``: the log's end is where it was when the replay started
    plus what it sent since (flushed before each read); each sample goes to stdout as JSON."""
    if args.max_lag is None:
        return None, None
    from streaming.backpressure import GroupLag, LagGate, LagSample
    from streaming.producer import log_ends

    start_ends = on_topic.ends if on_topic is not None else tuple(log_ends(options, config.topic,
                                                                           config.partitions).values())
    since = dict(enumerate(on_topic.since if on_topic is not None else start_ends))
    lag = GroupLag(options, topic=config.topic, group=args.group or config.group_id, since=since)
    begin = sum(start_ends)

    def report(sample: LagSample) -> None:
        print(json.dumps(sample.as_dict()), flush=True)

    return LagGate(lambda: lag(begin + producer.sent), max_lag=args.max_lag, report=report), lag
