"""The ending every benchmark shares (bench.print_result): one JSON object with --json, the
benchmark's own table without it; the benchmarks' mains end that way (their measurement replaced
by a fixed result here, so no benchmark runs)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from bench import image_cache, print_result, startup

RESULT = {"ratio": 1.5, "rows": [{"name": "ours", "rps": 10}]}


def test_json_prints_the_result_as_one_object_and_the_table_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    tables: list[dict[str, Any]] = []
    assert print_result(RESULT, as_json=True, table=tables.append) == 0
    assert json.loads(capsys.readouterr().out) == RESULT and tables == []
    assert print_result(RESULT, as_json=False, table=tables.append) == 0
    assert capsys.readouterr().out == "" and tables == [RESULT]


@pytest.mark.parametrize("module", [image_cache, startup])
def test_a_benchmarks_main_ends_with_it(module: Any, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    tables: list[dict[str, Any]] = []
    monkeypatch.setattr(module, "measure", lambda *a, **k: RESULT)
    monkeypatch.setattr(module, "print_table", tables.append)
    for flags in (["--json"], []):
        monkeypatch.setattr(sys, "argv", [module.__name__, *flags])
        assert module.main() == 0
    assert json.loads(capsys.readouterr().out) == RESULT and tables == [RESULT]
