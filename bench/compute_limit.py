"""The machine's dense compute limit for a training benchmark, measured in the same run.

- matmul GFLOP/s: numpy float32 (512 x 400) @ (400 x 400), the shape and the way a streamrec
  worker computes (one BLAS thread per process), in ``procs`` processes at once (one per worker:
  they share the cores as the workers do); the sum of their rates.
- FLOPs per sample of an MLP: 2 a b per layer forward, and twice that backward (the weight
  gradient and the input gradient, which the first layer needs too: it feeds the embeddings) -
  6 sum(a b). Bias, activations, pooling and the optimizers are not counted: they are the
  overhead the fraction shows.
- The limit: GFLOP/s / FLOPs per sample, in samples/s.

On a shared machine the probes' wall-clock rate falls with the load (another engineer's job
takes the cores), so each probe also reports its rate per CPU second: the core's speed when it
runs. The limit uses that rate times the number of workers (= cores here): what the job could
reach with the cores to itself, so a loaded run shows as a low fraction, never as an inflated
one. ``cpu_efficiency`` says how much of the CPU the job did get went into its matmuls.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence

_PROBE = """
import json, sys, time
import numpy as np
a = np.random.default_rng(0).random((512, 400), dtype=np.float32)
b = np.random.default_rng(1).random((400, 400), dtype=np.float32)
o = np.empty((512, 400), np.float32)
for _ in range(20):
    np.matmul(a, b, out=o)
n, t, c = 0, time.perf_counter(), time.process_time()
while time.perf_counter() - t < float(sys.argv[1]):
    np.matmul(a, b, out=o)
    n += 1
flops = 2 * 512 * 400 * 400 * n
print(json.dumps([flops / (time.perf_counter() - t) / 1e9, flops / (time.process_time() - c) / 1e9]))
"""


def matmul_gflops(procs: int, seconds: float = 2.0) -> dict:
    """``procs`` concurrent single-threaded numpy matmul probes: GFLOP/s summed over wall time
    (``wall_gflops``, what the machine gave them) and over CPU time (``gflops``: the fastest probe's
    rate per CPU second times ``procs``: the higher, so the stricter limit), with the load average."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load = os.getloadavg()[0]
    running = [subprocess.Popen([sys.executable, "-c", _PROBE, str(seconds)], stdout=subprocess.PIPE, text=True,
                                env=env) for _ in range(procs)]
    rates = [json.loads(p.communicate()[0]) for p in running]
    per_cpu = [r[1] for r in rates]
    return {"gflops": round(max(per_cpu) * procs, 1), "per_cpu_second": [round(r, 1) for r in per_cpu],
            "wall_gflops": round(sum(r[0] for r in rates), 1), "load_avg_1m": round(load, 2)}


def mlp_flops_per_sample(sizes: Sequence[int]) -> int:
    """Forward + backward matmul FLOPs of one sample through an MLP of layer ``sizes``."""
    return 6 * sum(a * b for a, b in itertools.pairwise(sizes))


def limit(gflops: float, flops_per_sample: int) -> float:
    """Samples/s the matmuls alone would allow."""
    return gflops * 1e9 / flops_per_sample
