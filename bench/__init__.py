"""Benchmarks: each measures streamrec against a baseline in the same run; run one as `python -m bench.NAME`
from the repository root (`--help` lists its options; bench/RESULTS.md holds the figures)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the repository root: the working directory of the processes a benchmark starts with `python -m`
REPO = Path(__file__).resolve().parent.parent


def print_result(result: dict[str, Any], *, as_json: bool, table: Callable[[dict[str, Any]], None]) -> int:
    """A benchmark's ending: its result as one JSON object (``--json``) or as its table; the exit status."""
    if as_json:
        print(json.dumps(result))
    else:
        table(result)
    return 0
