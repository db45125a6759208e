"""NaN/Inf screening of pushed gradients in one pass (no temporary boolean matrix)."""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel


@kernel(**JIT)
def finite_rows(grads: np.ndarray, shows: np.ndarray, clicks: np.ndarray, ok: np.ndarray) -> int:
    """``ok[i]`` = row i of grads and its show/click are finite; returns the count of bad rows."""
    bad = 0
    for i in range(grads.shape[0]):
        acc = shows[i] * np.float32(0.0) + clicks[i] * np.float32(0.0)
        for j in range(grads.shape[1]):
            acc += grads[i, j] * np.float32(0.0)  # 0 * x is NaN exactly when x is NaN or +-Inf
        ok[i] = acc == np.float32(0.0)
        if not ok[i]:
            bad += 1
    return bad
