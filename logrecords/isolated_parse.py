"""Parsing that one record cannot break: a parser failure is confined to the records causing it.

Parsers reject bad records with reasons and never raise for them. Should one raise anyway (a
bug, a record shape nobody foresaw), a consumer that lets the error out dies on the same record
after every restart and its partition never moves: a poison pill. So the batch is parsed again
record by record, each record that still raises becomes a ``PARSER_ERROR`` reject (dead-lettered
with its bytes like any other), and the rest is parsed together as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from logrecords.batch import Batch
from logrecords.parsers import Parser
from logrecords.rejects import Rejected, RejectReason

log = logging.getLogger(__name__)

MAX_DETAIL = 300


def parse_isolating(parser: Parser, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
    """``parser.parse(values)``; if it raises, the records that make it raise are rejected alone."""
    try:
        return parser.parse(values)
    except Exception as err:  # any parser failure: isolated below
        log.warning("parser failed on a batch of %d records (%s: %s); isolating the records",
                    len(values), type(err).__name__, err)
    failed: list[Rejected] = []
    good: list[int] = []
    for i, v in enumerate(values):
        try:
            parser.parse([v])
            good.append(i)
        except Exception as err:
            failed.append(Rejected(i, RejectReason.PARSER_ERROR, f"{type(err).__name__}: {err}"[:MAX_DETAIL], v))
    batch, rejected = parser.parse([values[i] for i in good])
    index = np.asarray(good, dtype=np.int64)
    rejected = [Rejected(int(index[r.index]), r.reason, r.detail, r.raw) for r in rejected]
    return batch, sorted(rejected + failed, key=lambda r: r.index)
