"""Feature admission: which unknown ids earn a row on push.

Until admitted, an id has no row: pull returns its deterministic initializer row without
storing it, and push only counts it. Policies are chosen per table by config
(:data:`tables.table_config.AdmissionConfig`). Pending counts live in count-min sketches of fixed
size; when an id is admitted its estimate is subtracted again, so an id that is later
evicted starts from (about) zero, like a never-seen id.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError
from core.kernel_cache import JIT, kernel
from tables.hashmap import mix64
from tables.sketch import CountMinSketch
from tables.table_config import AlwaysAdmission, CountAdmission, ProbabilityAdmission, ScoreAdmission

_S40 = np.uint64(40)
_INV24 = np.float64(1.0 / (1 << 24))


@kernel(**JIT)
def _coin(keys: np.ndarray, seed: np.uint64, draw: np.uint64, p: float, out: np.ndarray) -> None:
    salt = mix64(seed ^ mix64(draw))
    for i in range(keys.shape[0]):
        out[i] = np.float64(mix64(keys[i] ^ salt) >> _S40) * _INV24 < p


class Admission:
    """Base policy: decides for the unique unknown keys of one push."""

    def __init__(self) -> None:
        self.admitted = 0
        self.pending_estimate = 0

    def admit(self, keys: np.ndarray, shows: np.ndarray, clicks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def state(self) -> dict[str, np.ndarray]:
        return {"admission_counters": np.array([self.admitted, self.pending_estimate], np.int64)}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.admitted, self.pending_estimate = (int(v) for v in arrays["admission_counters"])

    def memory_bytes(self) -> int:
        return 0

    def _count(self, admitted: np.ndarray, fresh: int) -> np.ndarray:
        n_adm = int(admitted.sum())
        self.admitted += n_adm
        self.pending_estimate = max(0, self.pending_estimate + fresh - n_adm)
        return admitted


class AlwaysAdmit(Admission):
    def admit(self, keys: np.ndarray, shows: np.ndarray, clicks: np.ndarray) -> np.ndarray:
        return self._count(np.ones(keys.shape[0], np.bool_), keys.shape[0])


class CountThreshold(Admission):
    def __init__(self, cfg: CountAdmission) -> None:
        super().__init__()
        self.cfg = cfg
        self.sketch = CountMinSketch(cfg.sketch_width, cfg.sketch_depth)

    def admit(self, keys: np.ndarray, shows: np.ndarray, clicks: np.ndarray) -> np.ndarray:
        est, fresh = self.sketch.add(keys, shows)
        admitted = est >= np.float32(self.cfg.min_count)
        if admitted.any():
            self.sketch.subtract(keys[admitted], est[admitted])
        return self._count(admitted, fresh)

    def state(self) -> dict[str, np.ndarray]:
        return {**super().state(), "sketch": self.sketch.table}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_state(arrays)
        self.sketch.table[...] = arrays["sketch"]

    def memory_bytes(self) -> int:
        return self.sketch.nbytes


class ProbabilityAdmit(Admission):
    """Each push of an unknown id admits it with probability p. The draw is a hash of
    (seed, key, push number), so a restored table makes the same decisions."""

    def __init__(self, cfg: ProbabilityAdmission, seed: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.seed = np.uint64(seed)
        self.draws = 0

    def admit(self, keys: np.ndarray, shows: np.ndarray, clicks: np.ndarray) -> np.ndarray:
        out = np.empty(keys.shape[0], np.bool_)
        _coin(keys, self.seed, np.uint64(self.draws), self.cfg.probability, out)
        self.draws += 1
        # No per-id memory here, so pending ids are not tracked (pending_estimate stays 0).
        return self._count(out, int(out.sum()))

    def state(self) -> dict[str, np.ndarray]:
        return {**super().state(), "draws": np.array([self.draws], np.int64)}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_state(arrays)
        self.draws = int(arrays["draws"][0])


class ScoreThreshold(Admission):
    """Admit once (show - click) * nonclick_coeff + click * click_coeff >= threshold."""

    def __init__(self, cfg: ScoreAdmission) -> None:
        super().__init__()
        self.cfg = cfg
        self.shows = CountMinSketch(cfg.sketch_width, cfg.sketch_depth)
        self.clicks = CountMinSketch(cfg.sketch_width, cfg.sketch_depth)

    def admit(self, keys: np.ndarray, shows: np.ndarray, clicks: np.ndarray) -> np.ndarray:
        s, fresh = self.shows.add(keys, shows)
        c_est, _ = self.clicks.add(keys, clicks)
        c = np.minimum(c_est, s)
        score = (s - c) * np.float32(self.cfg.nonclick_coeff) + c * np.float32(self.cfg.click_coeff)
        admitted = score >= np.float32(self.cfg.threshold)
        if admitted.any():
            self.shows.subtract(keys[admitted], s[admitted])
            self.clicks.subtract(keys[admitted], c_est[admitted])  # all of it, not the clipped c
        return self._count(admitted, fresh)

    def state(self) -> dict[str, np.ndarray]:
        return {**super().state(), "sketch_shows": self.shows.table, "sketch_clicks": self.clicks.table}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        super().load_state(arrays)
        self.shows.table[...] = arrays["sketch_shows"]
        self.clicks.table[...] = arrays["sketch_clicks"]

    def memory_bytes(self) -> int:
        return self.shows.nbytes + self.clicks.nbytes


def carry_over(old: Admission, fresh: Admission) -> None:
    """Give ``fresh`` (a changed policy) what ``old`` knew: its pending counts when both keep
    them in the same shape (same kind and sketch sizes), else only the admitted count."""
    old_state = old.state()
    try:
        same_shape = all(old_state[k].shape == v.shape for k, v in fresh.state().items())
    except KeyError:
        same_shape = False
    if same_shape:
        fresh.load_state(old_state)
    else:
        fresh.admitted = old.admitted


def make_admission(cfg: Any, seed: int) -> Admission:
    """The policy object for an admission config."""
    if isinstance(cfg, AlwaysAdmission):
        return AlwaysAdmit()
    if isinstance(cfg, CountAdmission):
        return CountThreshold(cfg)
    if isinstance(cfg, ProbabilityAdmission):
        return ProbabilityAdmit(cfg, seed)
    if isinstance(cfg, ScoreAdmission):
        return ScoreThreshold(cfg)
    raise TypeError(f"unknown admission config {type(cfg).__name__}")


# What one table's sketches may take of the memory a process has, unless its shard says otherwise.
DEFAULT_SKETCH_SHARE = 0.25
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def sketch_bytes(cfg: Any) -> int:
    """Bytes the count-min sketches of admission config ``cfg`` take (float32 cells), before
    any is allocated: one sketch for ``count``, two (shows, clicks) for ``score``."""
    if isinstance(cfg, CountAdmission | ScoreAdmission):
        return (2 if isinstance(cfg, ScoreAdmission) else 1) * cfg.sketch_width * cfg.sketch_depth * 4
    return 0


def memory_bytes_available() -> int:
    """The memory this process may use: the machine's physical memory, or its container's
    (cgroup) limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_sketch_memory(cfg: Any, *, table: str, share: float, key: str = "admission") -> None:
    """ConfigError naming the sketch keys and the limit when ``cfg``'s sketches would take more
    than ``share`` of :func:`memory_bytes_available` (a sketch is allocated whole, and every
    cell is written as ids arrive, so an oversized one ends in the OOM killer, not an error)."""
    need = sketch_bytes(cfg)
    if need == 0:
        return
    memory = memory_bytes_available()
    limit = int(share * memory)
    if need > limit:
        n = 2 if isinstance(cfg, ScoreAdmission) else 1
        raise ConfigError(
            f"table {table}: {key}.sketch_width {cfg.sketch_width} x {key}.sketch_depth {cfg.sketch_depth} needs "
            f"{need} bytes of sketches ({n} x width x depth x 4 bytes), over the limit of {limit} bytes "
            f"(shard.max_sketch_share {share} of {memory} bytes of memory); lower the width or depth",
            detail={"keys": [f"{key}.sketch_width", f"{key}.sketch_depth"], "table": table,
                    "sketch_bytes": need, "limit_bytes": limit})
