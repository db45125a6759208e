"""The records a parse kernel could not decide go through the parser's reference path.

Both numba kernels (JSON lines, CSV) mark what they cannot decide FALLBACK (escapes, exponents,
quotes, syntax errors); the reference path defines the semantics for those. Their rows come
last in the batch; their rejects keep their index in the input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from streaming.batch import Batch, concat_batches
from streaming.rejects import Rejected

ReferenceParse = Callable[[Sequence[bytes]], tuple[Batch, list[Rejected]]]


def with_reference(batch: Batch, rejected: list[Rejected], slow: np.ndarray, values: Sequence[bytes],
                   parse_reference: ReferenceParse) -> tuple[Batch, list[Rejected]]:
    """``batch``/``rejected`` of the kernel plus the reference parse of ``values[slow]``."""
    if not slow.size:
        return batch, rejected
    other, other_rejected = parse_reference([values[i] for i in slow])
    rejected = rejected + [dataclasses.replace(r, index=int(slow[r.index])) for r in other_rejected]
    rejected.sort(key=lambda r: r.index)
    return concat_batches([batch, other]), rejected
