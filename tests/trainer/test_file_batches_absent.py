"""train-files' parsing counts the records lacking each required field, as the streaming job does."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from logrecords.schema_config import SchemaConfig
from streaming.dead_letter import DeadLetters
from trainer.file_worker import file_batches

SCHEMA = SchemaConfig.model_validate({
    "format": "csv", "label": "click", "item_id": "item",
    "slots": [{"name": "year", "kind": "dense"}, {"name": "item", "kind": "sparse", "hash": "int"}],
})


def test_absent_fields_and_their_refusals_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"  # every row stops before 'year'
    path.write_text("\n".join(["click,item,year", *(f"1,{i}" for i in range(300))]) + "\n")
    dead, absent = DeadLetters(), Counter()
    kept = sum(len(b) for b in file_batches([str(path)], SCHEMA, 50, dead, absent=absent))
    assert absent == {"year": 300}
    assert dead.counts == {"absent_field": 300 - kept} and kept < 300
