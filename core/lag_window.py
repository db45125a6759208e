"""The recent lags of one artifact (receipt -> served seconds) and their quantiles: the live
rows', the live item vectors' and the user history's freshness."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np


class LagWindow:
    """The last ``size`` lags; appended by one thread, read by any (a deque's appends are atomic)."""

    def __init__(self, size: int) -> None:
        self._lags: deque[float] = deque(maxlen=size)

    def add(self, lags: Iterable[float]) -> None:
        self._lags.extend(lags)

    def quantile(self, q: float) -> float | None:
        """Quantile ``q`` (0..1) of the recent lags; None before the first."""
        if not self._lags:
            return None
        return float(np.quantile(np.array(tuple(self._lags)), q))  # tuple(): one C-level copy, taken whole
