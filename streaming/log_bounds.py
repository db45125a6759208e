"""Where a partition's log really ends, and which restored offsets lie past it.

A checkpoint's offsets past the end of the log mean the topic was recreated (an in-memory
broker restarted, as the embedded broker of `streamrec up` does): resuming there would wait
for the new log to grow that long. Kafka answers such a fetch with OFFSET_OUT_OF_RANGE and
the consumer resets to earliest; tansu waits instead, and its list-offsets answer for
"latest" is short of the true end by up to one batch (the last batch's base offset + 1). So
an offset past that answer is confirmed with a fetch, whose high watermark is exact.
"""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

_PROBE_S = 5.0


def past_the_end(options: dict[str, Any], topic: str, offsets: dict[int, int]) -> set[int]:
    """Partitions whose restored offset lies past the end of their log (empty when unsure)."""
    if not offsets:
        return set()
    tps = {p: TopicPartition(topic, p) for p in offsets}
    probe = KafkaConsumer(**options, group_id=None, enable_auto_commit=False)
    try:
        listed = probe.end_offsets(list(tps.values()))
        suspects = {p for p, off in offsets.items() if off > (listed.get(tps[p]) or 0)}
        if not suspects:
            return set()
        probe.assign([tps[p] for p in suspects])
        for p in suspects:
            probe.seek(tps[p], max(0, (listed.get(tps[p]) or 0) - 1))
        deadline = time.monotonic() + _PROBE_S
        while time.monotonic() < deadline and any(probe.highwater(tps[p]) is None for p in suspects):
            probe.poll(timeout_ms=200)
        return {p for p in suspects if probe.highwater(tps[p]) is not None and offsets[p] > probe.highwater(tps[p])}
    except KafkaError:
        return set()  # no answer: resume as asked, the fetch rules apply
    finally:
        probe.close()
