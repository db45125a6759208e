"""The records a parse kernel could not decide go through the parser's reference path.

Both numba kernels (JSON lines, CSV) mark what they cannot decide FALLBACK (escapes, exponents,
quotes, syntax errors); the reference path defines the semantics for those. The batch keeps the
input's order (a request's records are answered in the order sent); rejects keep their input index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from logrecords.batch import Batch, concat_batches
from logrecords.rejects import Rejected

ReferenceParse = Callable[[Sequence[bytes]], tuple[Batch, list[Rejected]]]


def with_reference(batch: Batch, rejected: list[Rejected], fast: np.ndarray, slow: np.ndarray,
                   values: Sequence[bytes], parse_reference: ReferenceParse) -> tuple[Batch, list[Rejected]]:
    """``batch``/``rejected`` of the kernel (``fast``: the input index of each of its rows) plus the
    reference parse of ``values[slow]``, in input order."""
    if not slow.size:
        return batch, rejected
    other, other_rejected = parse_reference([values[i] for i in slow])
    rejected = rejected + [dataclasses.replace(r, index=int(slow[r.index])) for r in other_rejected]
    rejected.sort(key=lambda r: r.index)
    kept = np.delete(slow, [r.index for r in other_rejected])
    order = np.argsort(np.concatenate([fast, kept]), kind="stable")
    return concat_batches([batch, other]).take(order), rejected
