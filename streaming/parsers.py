"""Pick the parser for a schema; every parser maps a list of message bytes to (Batch, rejected)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from streaming.batch import Batch
from streaming.criteo import CriteoParser
from streaming.json_lines import JsonLinesParser
from streaming.rejects import Rejected
from streaming.stream_config import SchemaConfig


class Parser(Protocol):
    schema: SchemaConfig

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]: ...


def make_parser(schema: SchemaConfig, *, max_message_bytes: int = 65536) -> Parser:
    if schema.format == "criteo":
        return CriteoParser(schema, max_message_bytes=max_message_bytes)
    return JsonLinesParser(schema, max_message_bytes=max_message_bytes)
