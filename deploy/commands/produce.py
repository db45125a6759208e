"""``streamrec produce``: replay a Criteo TSV or JSON-lines file into a Kafka topic."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("produce", help="replay a data file into a Kafka topic (batched, compressed)")
    p.add_argument("--file", required=True, help="Criteo TSV or JSON-lines file (.gz allowed)")
    p.add_argument("--format", choices=["criteo", "json"], required=True)
    p.add_argument("--topic", help="target topic (default: kafka.topic of the config)")
    p.add_argument("--rate", type=float, help="at most this many records per second")
    p.add_argument("--config", help="YAML file with a 'kafka:' section")
    p.add_argument("--bootstrap", help="host:port[,host:port] of the Kafka cluster (overrides the config)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import ConfigError
    from streaming.connection import client_options
    from streaming.criteo import CriteoParser
    from streaming.producer import RecordProducer, file_lines
    from streaming.stream_config import SchemaConfig, load_kafka_config
    from streaming.topics import ensure_topics

    bootstrap = args.bootstrap.split(",") if args.bootstrap else None
    config = load_kafka_config(args.config, bootstrap_servers=bootstrap, topic=args.topic)
    if not config.bootstrap_servers:
        raise ConfigError("produce needs a Kafka cluster: set kafka.bootstrap_servers or pass --bootstrap "
                          "(the embedded broker lives only as long as the streamrec process that started it)")
    options = client_options(config, list(config.bootstrap_servers))
    ensure_topics(config, options)
    # Lines are checked with the parser on the way, so a wrong --format shows up at once.
    rejected: Counter[str] = Counter()
    if args.format == "criteo":
        parser = CriteoParser(max_message_bytes=config.max_message_bytes)
    else:
        from streaming.json_lines import JsonLinesParser

        parser = JsonLinesParser(SchemaConfig(), max_message_bytes=config.max_message_bytes)

    def checked() -> Iterator[bytes]:
        chunk: list[bytes] = []
        for line in file_lines(args.file):
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

    with RecordProducer(config, options) as producer:
        sent = producer.send_all(checked(), rate=args.rate)
    print(f"produced {sent} records from {args.file} into '{config.topic}'")
    if rejected:
        print(f"note: {sum(rejected.values())} of them will be dead-lettered by consumers: {dict(rejected)}",
              file=sys.stderr)
    return 0
