"""`config check --data` warns about a dense field the model cannot tell apart: MovieLens-100k's Unix-seconds
timestamp left as a dense input (log1p reads every value as about 20.6), not about a price; a wrong dense
transform is refused, naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli.main import main
from tests.cli.test_schema_infer import write
from tests.cli.test_schema_infer_event_time import movielens


def config(path: Path, dense: list[str], *, dense_log1p: bool = True) -> Path:
    slots = [{"name": n, "kind": "dense"} for n in dense] + [{"name": "item_id", "kind": "sparse", "hash": "int"}]
    path.write_text(yaml.safe_dump({
        "schema": {"format": "json", "label": "liked", "slots": slots},
        "train": {"model": {"type": "wide_deep", "n_dense": len(dense), "dense_log1p": dense_log1p,
                            "slots": [{"name": "item_id"}]}}}))
    return path


def test_a_timestamp_left_as_a_dense_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = movielens(500)
    for k, r in enumerate(recs):
        r["price"] = 1.5 + k % 20
    data = write(tmp_path / "u.jsonl", recs)
    assert main(["config", "check", "--config", str(config(tmp_path / "c.yaml", ["timestamp", "price"])),
                 "--data", str(data)]) == 0
    err = capsys.readouterr().err
    assert "warning: dense field 'timestamp': the sample's values are 8.747e+08 .. 8.933e+08, which the model's " \
           "log1p(max(x, 0)) reads as 20.59 .. 20.61, nearly one value" in err
    assert "'price'" not in err
    assert main(["config", "check", "--config", str(config(tmp_path / "raw.yaml", ["price"], dense_log1p=False)),
                 "--data", str(data)]) == 0
    assert "warning" not in capsys.readouterr().err  # 1.5 .. 20.5 read raw: fine


@pytest.mark.parametrize(("slot", "model", "named"), [
    ({"name": "price", "kind": "dense", "transform": {"kind": "standardize", "mean": 1.0, "std": 0.0}}, {},
     "'schema.slots.0.transform.standardize.std': Input should be greater than 0"),
    ({"name": "price", "kind": "dense", "transform": {"kind": "bucketize"}}, {},
     "'schema.slots.0.transform': Input tag 'bucketize' found using 'kind' does not match any of the expected tags"),
    ({"name": "price", "kind": "dense", "transform": {"kind": "standardize", "mean": 1.0, "std": 2.0, "lg": True}}, {},
     "unknown key 'schema.slots.0.transform.standardize.lg'"),
    ({"name": "price", "kind": "sparse", "transform": {"kind": "none"}}, {},
     "slot 'price': transform needs a dense slot"),
    ({"name": "price", "kind": "dense"}, {"n_dense": 1, "dense_transforms": [{"kind": "none"}, {"kind": "none"}]},
     "dense_transforms has 2 entries for n_dense 1"),
])
def test_a_wrong_dense_transform_is_refused_naming_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            slot: dict, model: dict, named: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "schema": {"format": "json", "label": "liked", "slots": [slot, {"name": "item_id", "kind": "sparse"}]},
        "train": {"model": {"type": "wide_deep", "slots": [{"name": "item_id"}], **model}}}))
    assert main(["config", "check", "--config", str(path)]) == 2
    assert named in capsys.readouterr().err
