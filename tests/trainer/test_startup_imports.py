"""What a worker and a shard load before their first batch or request: each in a fresh interpreter,
the worker's imports and numba's registries (trainer.file_worker.load_numba_runtime) and a shard's
kernel warm-up load neither Kafka, nor scipy.linalg, nor the HTTP and checksum libraries they do
not call; and numba, started that way, still compiles a kernel that calls BLAS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
NOT_LOADED = ("kafka", "scipy.linalg", "prometheus_client", "crc32c", "fastapi", "pandas", "pyarrow", "faiss")
_CHECK = f"import sys\nloaded = [m for m in {NOT_LOADED!r} if m in sys.modules]\nassert not loaded, loaded\n"


def _run(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_file_worker_loads_no_kafka_scipy_linalg_http_or_checksums_before_its_first_batch() -> None:
    _run("import trainer.file_worker as w\nw.load_numba_runtime()\n" + _CHECK)


def test_a_shard_warms_its_kernels_without_scipy_linalg_or_kafka() -> None:
    _run("from launcher.file_job import criteo_model\n"
         "from ps.shard_warmup import warm_kernels\n"
         "model = criteo_model('wide_deep', embedding_dim=4, mlp=(8,), optimizer='adam', lr=1e-3)\n"
         "warm_kernels(model.table_configs())\n"
         "import sys\nassert 'scipy.linalg' not in sys.modules and 'kafka' not in sys.modules\n")


def test_numba_started_without_scipy_linalg_compiles_a_blas_call_as_a_plain_start_does() -> None:
    # numba's BLAS needs scipy, which the test extra does not install: started either way, the same outcome
    blas = ("import numpy as np\nfrom numba import njit\n{start}"
            "dot = njit(lambda a, b: np.dot(a, b))\n"
            "try:\n    print(dot(np.eye(3, dtype=np.float32), np.arange(3, dtype=np.float32)).tolist())\n"
            "except ImportError as err:\n    print('no BLAS:', err)\n")
    plain, started = (subprocess.run([sys.executable, "-c", blas.format(start=start)], cwd=REPO, capture_output=True,
                                     text=True, timeout=300)
                      for start in ("", "from core.kernel_cache import load_runtime\nload_runtime()\n"))
    assert plain.returncode == started.returncode == 0, (plain.stderr[-2000:], started.stderr[-2000:])
    assert started.stdout == plain.stdout, (plain.stdout, started.stdout)
