"""Ingest benchmark: raw kafka-python consume vs our consume + parse + batch vs parse alone.

All three run in one process against the embedded tansu broker, on the same topic of
~200-byte Criteo lines (planted synthetic data; the last categoricals are left empty to reach
that size, as in real Criteo rows). Each measurement is repeated and the best run is kept,
because the machine is shared. ``--json`` prints one JSON object.

Targets: ingest >= 0.6 x raw and >= 100k records/s; parse alone >= 300k records/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# Run as a script, bench/ comes first on sys.path and bench/tables.py would shadow the tables package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from streaming.broker import EmbeddedBroker  # noqa: E402
from streaming.connection import client_options  # noqa: E402
from streaming.consumer import Membership, StreamConsumer  # noqa: E402
from streaming.criteo import CriteoParser  # noqa: E402
from streaming.generator import PlantedModel  # noqa: E402
from streaming.json_lines import JsonLinesParser  # noqa: E402
from streaming.parsers import Parser  # noqa: E402
from streaming.producer import RecordProducer  # noqa: E402
from streaming.sample_encoding import criteo_lines, generated_json_schema, json_lines  # noqa: E402
from streaming.stream_config import KafkaConfig, SchemaConfig  # noqa: E402
from streaming.topics import ensure_topics  # noqa: E402

BATCH = 8192


def make_lines(n: int, seed: int) -> list[bytes]:
    sample = PlantedModel(seed=seed).sample(n)
    sample.sparse_missing[:, 19:] = True  # C20..C26 empty: ~200-byte lines
    return criteo_lines(sample)


def raw_consume(config: KafkaConfig, bootstrap: list[str], n: int) -> float:
    consumer = KafkaConsumer(
        **client_options(config, bootstrap), enable_auto_commit=False, group_id=None,
        max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20, max_poll_records=BATCH,
    )
    tps = [TopicPartition(config.topic, p) for p in range(config.partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = 0
    start = time.perf_counter()
    while got < n:
        for recs in consumer.poll(timeout_ms=1000, max_records=BATCH).values():
            got += len(recs)
    elapsed = time.perf_counter() - start
    consumer.close()
    return got / elapsed


def ingest(config: KafkaConfig, bootstrap: list[str], n: int) -> float:
    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap, membership=Membership.ASSIGN) as consumer:
        consumer.seek_to({p: 0 for p in range(config.partitions)})
        got = 0
        start = time.perf_counter()
        while got < n:
            batch = consumer.poll_batch()
            if batch is not None:
                got += len(batch)
                consumer.tracker.mark_pushed(batch)
        elapsed = time.perf_counter() - start
        if consumer.reject_counts:
            raise SystemExit(f"unexpected rejects: {consumer.reject_counts}")
    return got / elapsed


def parse_alone(lines: list[bytes], parser: Parser | None = None) -> float:
    parser = parser or CriteoParser()
    parser.parse(lines[:BATCH])  # compile / warm the kernel outside the timing
    start = time.perf_counter()
    for i in range(0, len(lines), BATCH):
        parser.parse(lines[i : i + BATCH])
    return len(lines) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    lines = make_lines(args.records, seed=11)
    avg_bytes = float(np.mean([len(x) for x in lines]))
    config = KafkaConfig(topic="bench-ingest", dead_letter_topic="bench-ingest.dead", partitions=4,
                         batch_size=BATCH, batch_timeout_ms=200)
    with EmbeddedBroker() as broker:
        bootstrap = [broker.bootstrap]
        options = client_options(config, bootstrap)
        ensure_topics(config, options)
        with RecordProducer(config, options) as producer:
            producer.send_all(lines)
        raw, ours = [], []
        for _ in range(args.repeats):
            raw.append(raw_consume(config, bootstrap, args.records))
            ours.append(ingest(config, bootstrap, args.records))
    parse = max(parse_alone(lines) for _ in range(args.repeats))
    # Context only (no target): the JSON-lines parser on the generator's ~550-byte, 40-field records.
    json_records = json_lines(PlantedModel(seed=12).sample(min(args.records, 100_000)))
    json_parser = JsonLinesParser(generated_json_schema())
    parse_json = max(parse_alone(json_records, json_parser) for _ in range(args.repeats))
    result = {
        "records": args.records,
        "avg_message_bytes": round(avg_bytes, 1),
        "raw_consume_per_s": round(max(raw)),
        "ingest_per_s": round(max(ours)),
        "parse_per_s": round(parse),
        "ingest_vs_raw": round(max(ours) / max(raw), 3),
        "parse_json_per_s": round(parse_json),
    }
    result["targets_met"] = bool(
        result["ingest_vs_raw"] >= 0.6 and result["ingest_per_s"] >= 100_000 and result["parse_per_s"] >= 300_000
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"ingest benchmark: {args.records} Criteo lines of {avg_bytes:.0f} bytes, embedded tansu broker, "
          f"best of {args.repeats}")
    print(f"{'measurement':<38}{'records/s':>12}{'target':>16}")
    print(f"{'raw kafka-python consume (baseline)':<38}{result['raw_consume_per_s']:>12,}{'':>16}")
    print(f"{'streamrec consume + parse + batch':<38}{result['ingest_per_s']:>12,}{'>= 100,000':>16}")
    print(f"{'streamrec parse alone (from bytes)':<38}{result['parse_per_s']:>12,}{'>= 300,000':>16}")
    print(f"{'ratio ingest / raw':<38}{result['ingest_vs_raw']:>12.2f}{'>= 0.60':>16}")
    print(f"{'(JSON-lines parse alone, 40 fields)':<38}{result['parse_json_per_s']:>12,}{'':>16}")
    print(f"targets met: {'yes' if result['targets_met'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
