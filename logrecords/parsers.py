"""Pick the parser for a schema; every parser maps a list of message bytes to (Batch, rejected)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.errors import ConfigError
from logrecords.batch import Batch
from logrecords.criteo import CriteoParser
from logrecords.csv_lines import CsvLinesParser
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import Rejected
from logrecords.schema_config import SchemaConfig


class Parser(Protocol):
    schema: SchemaConfig

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]: ...


def make_parser(schema: SchemaConfig, *, max_message_bytes: int = 65536) -> Parser:
    """The parser of one record per message; csv messages need ``schema.columns`` (no header row)."""
    if schema.format == "criteo":
        return CriteoParser(schema, max_message_bytes=max_message_bytes)
    if schema.format == "csv":
        return CsvLinesParser(schema, max_message_bytes=max_message_bytes)
    if schema.format == "parquet":
        raise ConfigError("schema.format parquet is for files (train-files, the file dataset); "
                          "records as messages need json, csv or criteo")
    return JsonLinesParser(schema, max_message_bytes=max_message_bytes)
