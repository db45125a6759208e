"""Pass checkpoints: ``<root>/pass-<n>/`` and the manifest that makes a pass exist.

Layout of a pass directory::

    shard-<i>/        each PS shard's sparse tables (a delta on cursor "checkpoint", a base
                      every K passes) and dense parts, ``shard.json`` last (tables.shard_server)
    worker-<r>.arrays a worker's dense-optimizer state and metric histograms
    worker-<r>.json   its Kafka offsets, record counts, newest record time
    pass.json         the manifest, written LAST (temp + fsync + rename): pass id, offsets,
                      metrics, evicted count, and size + CRC-32C of every file above; the
                      chief writes it after the workers were released, once every shard
                      finished writing its save (trainer.pass_commit)

A pass without ``pass.json`` does not exist: restore ignores it and the chief deletes it at
start. Every file is verified against the manifest before anything is loaded.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tables.checkpoint import decode_arrays, encode_arrays, fsync_dir, read_json, read_verified, write_bytes, write_json
from tables.errors import CorruptData

MANIFEST = "pass.json"
_PASS_DIR = re.compile(r"^pass-(\d{8})$")


def pass_dir(root: Path, pass_id: int) -> Path:
    return Path(root) / f"pass-{pass_id:08d}"


def shard_template(root: Path, pass_id: int) -> str:
    """Where shard ``{shard}`` saves its part of pass ``pass_id`` (a template for PSClient.save)."""
    return str(pass_dir(root, pass_id) / "shard-{shard}")


def _pass_ids(root: Path) -> list[int]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _PASS_DIR.match(p.name)))


def complete_passes(root: Path) -> list[int]:
    """Ids of passes whose manifest exists, oldest first (contents are verified on read)."""
    return [n for n in _pass_ids(root) if (pass_dir(root, n) / MANIFEST).is_file()]


def discard_incomplete(root: Path) -> list[int]:
    """Delete pass directories without a manifest (a commit that died half way)."""
    gone = [n for n in _pass_ids(root) if not (pass_dir(root, n) / MANIFEST).is_file()]
    for n in gone:
        shutil.rmtree(pass_dir(root, n), ignore_errors=True)
    return gone


def write_worker_part(root: Path, pass_id: int, rank: int, arrays: dict[str, np.ndarray],
                      info: dict[str, Any]) -> None:
    d = pass_dir(root, pass_id)
    d.mkdir(parents=True, exist_ok=True)
    entry = write_bytes(d / f"worker-{rank}.arrays", encode_arrays(arrays))
    write_json(d / f"worker-{rank}.json", {**info, "arrays": entry})


def staying_ranks(root: Path, pass_id: int, ranks: list[int]) -> list[int]:
    """Ranks among ``ranks`` still training after pass ``pass_id`` (their part does not say
    they leave); the chief (rank 0), which commits for the others, when none stays. Every
    worker reads this from the parts right after the commit barrier, before the manifest
    (written later, in the background) exists."""
    staying = [r for r in ranks if not read_json(pass_dir(root, pass_id) / f"worker-{r}.json").get("leaving")]
    return staying or [0]


def commit_pass(root: Path, pass_id: int, manifest: dict[str, Any], *, ranks: list[int],
                shard_entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the manifest last: checksums of the worker parts (of ``ranks``) and each shard's ``shard.json``."""
    d = pass_dir(root, pass_id)
    files: dict[str, dict[str, Any]] = {}
    for r in ranks:
        info = read_json(d / f"worker-{r}.json")
        files[f"worker-{r}.arrays"] = info["arrays"]
        files[f"worker-{r}.json"] = _entry_of(d / f"worker-{r}.json")
    for i, e in enumerate(shard_entries):
        files[f"shard-{i}/shard.json"] = e["manifest"]
    man = {**manifest, "pass": pass_id, "files": files, "shard_modes": [e["mode"] for e in shard_entries]}
    write_json(d / MANIFEST, man)
    fsync_dir(Path(root))
    return man


def _entry_of(path: Path) -> dict[str, Any]:
    import crc32c

    data = path.read_bytes()
    return {"file": path.name, "bytes": len(data), "crc32c": crc32c.crc32c(data)}


def read_pass(root: Path, pass_id: int) -> dict[str, Any]:
    """The verified manifest of a complete pass (CorruptData names the bad file)."""
    d = pass_dir(root, pass_id)
    man = read_json(d / MANIFEST)
    for name, entry in man.get("files", {}).items():
        where = d / Path(name).parent
        read_verified(where, {**entry, "file": Path(name).name})
    if man.get("pass") != pass_id:
        raise CorruptData(f"{d / MANIFEST}: names pass {man.get('pass')}, not {pass_id}")
    return man


def read_worker_part(root: Path, pass_id: int, rank: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    d = pass_dir(root, pass_id)
    info = read_json(d / f"worker-{rank}.json")
    arrays = decode_arrays(read_verified(d, info["arrays"]), str(d / f"worker-{rank}.arrays"))
    return info, arrays


def chain(root: Path, pass_id: int) -> list[str]:
    """Shard templates of the complete passes up to ``pass_id``, oldest first: each shard loads
    from its newest base among them."""
    return [shard_template(root, n) for n in complete_passes(root) if n <= pass_id]


def prune(root: Path, keep: int) -> list[int]:
    """Keep the newest ``keep`` complete passes and every older one their deltas need (back to
    the newest pass where every shard saved a base); delete the rest."""
    done = complete_passes(root)
    kept = done[-keep:]
    if not kept:
        return []
    oldest = kept[0]
    for n in reversed([n for n in done if n <= oldest]):
        modes = read_json(pass_dir(root, n) / MANIFEST).get("shard_modes", [])
        if modes and all(m == "base" for m in modes):
            oldest = n
            break
    else:
        return []
    gone = [n for n in done if n < oldest]
    for n in gone:
        shutil.rmtree(pass_dir(root, n), ignore_errors=True)
    return gone
