"""The trainer's view of the parameter server: a client plus an update mode.

- ``async`` (Paddle's a_sync): every push is applied on the shard at once.
- ``sync``: pushes of a step are held by the shards; :meth:`PSWorker.step` is a barrier
  after which every shard applies the sum of all workers' gradients once (so N workers
  equal one process training on the concatenated batch).
- ``geo``: the worker trains a local copy of the rows it touched with SGD at ``geo_lr`` and
  every ``geo_steps`` steps sends the deltas (local - last seen), which the shard adds; it
  then refreshes its copy. The shard table must use ``sgd`` with ``lr: 1`` (a pure sum).
  Dense arrays are pushed directly in geo mode.
"""

from __future__ import annotations

import numpy as np

from core.errors import ConfigError, InvalidInput
from ps.client import PSClient
from ps.cluster import ClusterSpec, Mode
from ps.protocol import Flag
from ps.ps_config import PSConfig, load_ps_config
from tables.table_config import OptimizerConfig


class _GeoCopy:
    """A worker's local rows of one table, and the values last seen on the shards."""

    def __init__(self) -> None:
        self.slots: dict[int, int] = {}
        self.rows = np.empty((0, 0), np.float32)
        self.base = np.empty((0, 0), np.float32)
        self.touched: set[int] = set()

    def lookup(self, client: PSClient, table: str, keys: np.ndarray) -> np.ndarray:
        missing = np.array([k for k in dict.fromkeys(keys.tolist()) if k not in self.slots], np.uint64)
        if missing.size:
            fresh = client.wait(client.pull(table, missing))
            start = len(self.slots)
            if self.rows.shape[1] != fresh.shape[1]:
                self.rows = np.empty((0, fresh.shape[1]), np.float32)
                self.base = self.rows.copy()
            self.rows = np.concatenate([self.rows, fresh])
            self.base = np.concatenate([self.base, fresh])
            self.slots.update((int(k), start + i) for i, k in enumerate(missing.tolist()))
        return np.fromiter((self.slots[k] for k in keys.tolist()), np.int64, keys.shape[0])

    def flush(self, client: PSClient, table: str) -> None:
        if not self.touched:
            return
        keys = np.array(sorted(self.touched), np.uint64)
        slots = np.fromiter((self.slots[k] for k in keys.tolist()), np.int64, keys.shape[0])
        deltas = self.rows[slots] - self.base[slots]
        fresh = client.wait(client.push_pull(table, keys, deltas, flags=Flag.GEO_DELTA))
        self.rows[slots] = fresh
        self.base[slots] = fresh
        self.touched.clear()


class PSWorker:
    """Pull, push and step through the parameter server in one of the three modes."""

    def __init__(self, client: PSClient, *, mode: Mode = "async", num_workers: int = 1, geo_steps: int = 10,
                 geo_lr: float = 0.05) -> None:
        if mode not in ("async", "sync", "geo"):
            raise ConfigError(f"unknown PS mode {mode!r}; use async, sync or geo")
        self.client = client
        self.mode = mode
        self.num_workers = num_workers
        self.geo_steps = geo_steps
        self.geo_lr = geo_lr
        self.steps = 0
        self._geo: dict[str, _GeoCopy] = {}

    @classmethod
    def from_spec(cls, spec: ClusterSpec, *, config: PSConfig | None = None, geo_lr: float = 0.05) -> PSWorker:
        if config is None:
            config = load_ps_config(spec.ps_config) if spec.ps_config else PSConfig()
        client = PSClient(spec.shard_endpoints, config=config.client, secret=spec.secret(),
                          dense_slice_min_elements=config.dense_slice_min_elements)
        if not spec.leased_rank:  # a leased rank is claimed later: the client's own id stands
            client.worker_id = str(spec.rank)  # sync barriers name a missing peer by its rank
        return cls(client, mode=spec.mode, num_workers=spec.num_workers, geo_steps=spec.geo_steps, geo_lr=geo_lr)

    def pull(self, table: str, keys: np.ndarray) -> np.ndarray:
        if self.mode != "geo":
            return self.client.wait(self.client.pull(table, keys))
        copy = self._geo.setdefault(table, _GeoCopy())
        slots = copy.lookup(self.client, table, np.asarray(keys, np.uint64))  # may grow copy.rows
        return copy.rows[slots]

    def push(self, table: str, keys: np.ndarray, grads: np.ndarray, *, shows: np.ndarray | None = None,
             clicks: np.ndarray | None = None) -> None:
        if self.mode == "geo":
            keys = np.asarray(keys, np.uint64)
            grads = np.asarray(grads, np.float32)
            if grads.shape[0] != keys.shape[0]:
                raise InvalidInput(f"grads has {grads.shape[0]} rows for {keys.shape[0]} keys")
            copy = self._geo.setdefault(table, _GeoCopy())
            slots = copy.lookup(self.client, table, keys)
            np.add.at(copy.rows, slots, -self.geo_lr * grads)
            copy.touched.update(keys.tolist())
            return
        flags = Flag.SYNC if self.mode == "sync" else Flag.NONE
        self.client.wait(self.client.push(table, keys, grads, shows=shows, clicks=clicks, flags=flags))

    def init_dense(self, name: str, initial: np.ndarray, *,
                   optimizer: OptimizerConfig | None = None) -> OptimizerConfig | None:
        return self.client.init_dense(name, initial, optimizer=optimizer)

    def pull_dense(self, name: str) -> np.ndarray:
        return self.client.wait(self.client.pull_dense(name))

    def push_dense(self, name: str, grad: np.ndarray, *, lr_scale: float = 1.0) -> None:
        sync = self.mode == "sync"
        self.client.wait(self.client.push_dense(name, grad, flags=Flag.SYNC if sync else Flag.NONE,
                                                lr_scale=1.0 if sync else lr_scale))

    def step(self) -> None:
        """End of a training step: the sync barrier, or the geo flush every ``geo_steps``."""
        self.steps += 1
        if self.mode == "sync":
            self.client.barrier(self.steps, self.num_workers)
        elif self.mode == "geo" and self.steps % self.geo_steps == 0:
            self.flush()

    def flush(self) -> None:
        """Send pending geo deltas now (also done by :meth:`close`)."""
        for table, copy in self._geo.items():
            copy.flush(self.client, table)

    def close(self) -> None:
        if self.mode == "geo":
            self.flush()
        self.client.close()
