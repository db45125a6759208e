"""Pick the parser for a schema; every parser maps a list of message bytes to (Batch, rejected).

The parser :func:`make_parser` gives also checks records for absent fields (logrecords.absent_fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.errors import ConfigError
from logrecords.absent_fields import AbsentFieldCheck
from logrecords.batch import Batch
from logrecords.criteo import CriteoParser
from logrecords.csv_lines import CsvLinesParser
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import Rejected
from logrecords.schema_config import SchemaConfig


class Parser(Protocol):
    schema: SchemaConfig

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]: ...


class CheckedParser:
    """A parser whose batches go through an :class:`AbsentFieldCheck` (its counts: ``check.absent``)."""

    def __init__(self, parser: Parser) -> None:
        self.parser = parser
        self.schema = parser.schema
        self.check = AbsentFieldCheck(parser.schema)

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        batch, rejected = self.parser.parse(values)
        return self.check.check(batch, rejected, values)


def make_parser(schema: SchemaConfig, *, max_message_bytes: int = 65536) -> CheckedParser:
    """The parser of one record per message; csv messages need ``schema.columns`` (no header row)."""
    parser: Parser
    if schema.format == "criteo":
        parser = CriteoParser(schema, max_message_bytes=max_message_bytes)
    elif schema.format == "csv":
        parser = CsvLinesParser(schema, max_message_bytes=max_message_bytes)
    elif schema.format == "parquet":
        raise ConfigError("schema.format parquet is for files (train-files, the file dataset); "
                          "records as messages need json, csv or criteo")
    else:
        parser = JsonLinesParser(schema, max_message_bytes=max_message_bytes)
    return CheckedParser(parser)
