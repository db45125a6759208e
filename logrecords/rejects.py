"""Why a record was rejected, and the rejected record itself (it goes to the dead-letter topic)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class RejectReason(IntEnum):
    """Reject codes; numba kernels write the integer, everything else uses the name."""

    OK = 0
    FIELD_COUNT = 1
    BAD_LABEL = 2
    BAD_DENSE = 3
    BAD_HEX = 4
    BAD_INT = 5
    INVALID_JSON = 6
    SCHEMA = 7
    OVERSIZED = 8
    BAD_TEXT = 9
    PARSER_ERROR = 10  # the parser itself failed on this record (a bug it must not turn into a crash)
    ABSENT_FIELD = 11  # lacks a field the schema requires, which too many records lack (logrecords.absent_fields)

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Rejected:
    """A record that could not be parsed: its index in the input, why, and its original bytes."""

    index: int
    reason: RejectReason
    detail: str
    raw: bytes
