"""The job's one item-frequency estimate, in the parameter server (``retrieval.shared_frequency``).

Each trainer reads part of the stream; an estimate of its own sees each item that much less often,
so its rate lags a drifting item's (models.item_frequency.reader_alpha) and its noise differs from
the other trainers'. Yi et al. (RecSys 2019) keep the estimate's arrays on the parameter servers:
here they are rate rows of the id-rows table :data:`RATES_TABLE` (one row per item hash, on the
item's shard, saved and restored with every pass like the history), and each step of each
trainer is one ``RATES`` request per shard (:meth:`ps.client.PSClient.rates`): the step's positive
items counted, the rates of the step's candidates answered. So every shard's clock counts the job's
steps, and an item's gaps are the steps of every trainer between its occurrences.

In-process on MovieLens 100K, two workers recall more with one shared estimate than with one
each (bench/RESULTS.md).
"""

from __future__ import annotations

import numpy as np

from ps.client import PSClient
from tables.id_rows_table import RATE_CLOCK_KEY

RATES_TABLE = "ids.item_frequency"


class SharedItemFrequency:
    """:class:`models.item_frequency.FrequencyEstimate` over the PS's rate rows."""

    def __init__(self, client: PSClient, alpha: float) -> None:
        self.client = client
        self.alpha = float(alpha)

    def observe(self, observed: np.ndarray, asked: np.ndarray) -> np.ndarray:
        return self.client.wait(self.client.rates(RATES_TABLE, _keys(observed), _keys(asked), alpha=self.alpha))


def _keys(items: np.ndarray) -> np.ndarray:
    """Item hashes as rate-row keys: the clock's key is no item's (a hash equal to it counts as 1's)."""
    keys = np.ascontiguousarray(items, np.uint64)
    clash = keys == np.uint64(RATE_CLOCK_KEY)
    return np.where(clash, np.uint64(1), keys) if clash.any() else keys
