"""Benchmarks: each measures streamrec against a baseline in the same run; run one as `python -m bench.NAME`
from the repository root (`--help` lists its options; bench/RESULTS.md holds the figures)."""

from pathlib import Path

# the repository root: the working directory of the processes a benchmark starts with `python -m`
REPO = Path(__file__).resolve().parent.parent
