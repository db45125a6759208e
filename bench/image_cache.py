"""A pod's start with the image's numba cache against the same start compiling at every pod start.

The image compiles streamrec's kernels at build time (deploy/warm-kernels.sh into
NUMBA_CACHE_DIR, for NUMBA_CPU_NAME=generic). Here that script fills a cache once (its wall and
CPU are the build's cost), then a shard of the committed Kubernetes deployment (its ps.yaml
rendered from deploy/k8s/values.yaml) is started from exec to its first answered pull, each repeat
once with that cache (the image now) and once with an empty one (the baseline: a pod that compiles
at its start, as the image did before), interleaved. Figures are medians; CPU seconds are the
shard process's until it answered.

Run: ``python -m bench.image_cache [--repeats 3] [--json]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import print_result
from bench.startup import shard_start
from launcher.k8s_render import streamrec_config
from launcher.k8s_values import load_values
from launcher.system_config import StreamrecConfig, role_files

REPO = Path(__file__).resolve().parent.parent
VALUES = REPO / "deploy" / "k8s" / "values.yaml"
WARM_SCRIPT = REPO / "deploy" / "warm-kernels.sh"


def _ps_yaml(out: Path) -> Path:
    config = StreamrecConfig.model_validate(streamrec_config(load_values(VALUES)))
    path = out / "ps.yaml"
    path.write_text(yaml.safe_dump(role_files(config, base=out)["ps.yaml"]))
    return path


def build_cache(cache: Path) -> dict[str, float]:
    """deploy/warm-kernels.sh into ``cache``: its wall and CPU seconds (children included)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    before = os.times()
    t = time.perf_counter()
    subprocess.run(["sh", str(WARM_SCRIPT)], env=env, check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    kernels = sum(1 for _ in cache.rglob("*.nbi"))
    return {"wall_s": round(time.perf_counter() - t, 1), "kernels": kernels,
            "cpu_s": round(after.children_user + after.children_system - before.children_user
                           - before.children_system, 1)}


def _start_with(cache: Path, ps_yaml: Path) -> dict[str, float]:
    saved = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(cache)  # the shard process inherits it
    try:
        return shard_start(ps_yaml)
    finally:
        if saved is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = saved


def measure(repeats: int) -> dict:
    os.environ.setdefault("NUMBA_CPU_NAME", "generic")  # as the image builds and runs
    with tempfile.TemporaryDirectory(prefix="streamrec-image-cache-") as tmp:
        work = Path(tmp)
        ps_yaml = _ps_yaml(work)
        build = build_cache(work / "image-cache")
        runs: dict[str, list[dict[str, float]]] = {"image cache": [], "empty cache": []}
        for i in range(repeats):  # interleaved: a change of the machine's load hits both alike
            runs["image cache"].append(_start_with(work / "image-cache", ps_yaml))
            runs["empty cache"].append(_start_with(work / f"empty-{i}", ps_yaml))
    rows = {name: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("wall_s", "cpu_s")}
            for name, rs in runs.items()}
    return {"repeats": repeats, "cores": len(os.sched_getaffinity(0)), "load_1min": round(os.getloadavg()[0], 1),
            "numba_cpu_name": os.environ["NUMBA_CPU_NAME"], "build": build, "shard_start": rows,
            "cpu_ratio": round(rows["empty cache"]["cpu_s"] / rows["image cache"]["cpu_s"], 1),
            "wall_ratio": round(rows["empty cache"]["wall_s"] / rows["image cache"]["wall_s"], 1)}


def print_table(out: dict) -> None:
    b = out["build"]
    print(f"image build: deploy/warm-kernels.sh cached {b['kernels']} kernels in {b['wall_s']} s wall, "
          f"{b['cpu_s']} CPU s (NUMBA_CPU_NAME={out['numba_cpu_name']}); {out['cores']} cores, load {out['load_1min']}")
    print(f"shard of deploy/k8s (values.yaml), exec to first answered pull, median of {out['repeats']}:")
    print(f"{'numba cache':<40}{'wall s':>8}{'CPU s':>8}")
    labels = {"image cache": "the image's (compiled at build)", "empty cache": "empty (baseline: compiles)"}
    for name, label in labels.items():
        r = out["shard_start"][name]
        print(f"{label:<40}{r['wall_s']:>8.3f}{r['cpu_s']:>8.3f}")
    print(f"baseline / image: {out['cpu_ratio']}x CPU, {out['wall_ratio']}x wall")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    out = measure(args.repeats)
    return print_result(out, as_json=args.json, table=print_table)


if __name__ == "__main__":
    sys.exit(main())
