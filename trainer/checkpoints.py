"""Pass checkpoints: ``<root>/pass-<n>/`` and the manifest that makes a pass exist.

Layout of a pass directory::

    shard-<i>/        each PS shard's sparse tables (a delta on cursor "checkpoint", a base
                      every K passes) and dense parts, ``shard.json`` last (ps.shard_server)
    worker-<r>.arrays a worker's dense-optimizer state and metric histograms
    worker-<r>.json   its Kafka offsets, record counts, newest record time, consumer lag
    metrics-total.arrays  metric histograms over every record since the job started
                      (trainer.pass_history; the series of passes lives beside the pass
                      directories, in pass-history.arrays, and survives their pruning)
    pass.json         the manifest, written LAST: pass id, offsets, metrics, evicted
                      count, and size + CRC-32C of every file above; the chief writes it
                      after the workers were released, once every shard finished writing
                      its save (trainer.pass_commit)

The root is a path or a URL (stores.store: ``s3://bucket/prefix``); every process reads
and writes it through its Store, so shards, workers and the chief may be on different hosts.
A file is atomic on both (temp + fsync + rename locally, one PUT on an object store); a pass
is not, so a pass without ``pass.json`` does not exist: restore ignores it and the chief
deletes it at start. Every file is verified against the manifest before anything is loaded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic_files import decode_arrays, encode_arrays, fsync_dir
from core.errors import CorruptData
from ps.admin import Replacement
from ps.placement import Placement, placement_for, saved_placement
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS
from stores.store import Store, open_store

MANIFEST = "pass.json"
_PASS_DIR = re.compile(r"^pass-(\d{8})$")
Root = str | Path | Store  # a path, a file:// or fsspec URL (s3://...), or its open Store


def pass_name(pass_id: int) -> str:
    return f"pass-{pass_id:08d}"


def pass_dir(root: Path, pass_id: int) -> Path:
    """The directory of a pass under a local root."""
    return Path(root) / pass_name(pass_id)


def shard_template(root: Root, pass_id: int) -> str:
    """Where shard ``{shard}`` saves its part of pass ``pass_id`` (a template for PSAdmin.save):
    a path, or a URL the shard uploads its save to."""
    return open_store(root).url(f"{pass_name(pass_id)}/shard-{{shard}}")


def _pass_ids(store: Store) -> list[int]:
    return sorted(int(m.group(1)) for name in store.list() if (m := _PASS_DIR.match(name)))


def complete_passes(root: Root) -> list[int]:
    """Ids of passes whose manifest exists, oldest first (contents are verified on read)."""
    store = open_store(root)
    return [n for n in _pass_ids(store) if store.exists(f"{pass_name(n)}/{MANIFEST}")]


def discard_incomplete(root: Root) -> list[int]:
    """Delete pass directories without a manifest (a commit that died half way)."""
    store = open_store(root)
    gone = [n for n in _pass_ids(store) if not store.exists(f"{pass_name(n)}/{MANIFEST}")
            and not store.exists(f"{pass_name(n)}/{QUARANTINED}")]
    for n in gone:
        store.remove(pass_name(n))
    return gone


QUARANTINED = "pass.json.corrupt"  # a pass whose files failed to load: kept to look at, never restored


def quarantine(root: Root, pass_id: int, reason: str) -> None:
    """Take pass ``pass_id`` out of the complete passes (its manifest moves to ``pass.json.corrupt``
    with the reason): every worker's next look for the newest usable pass skips it."""
    store = open_store(root)
    d = pass_name(pass_id)
    man = store.read_json(f"{d}/{MANIFEST}")
    store.write_json(f"{d}/{QUARANTINED}", {**man, "quarantined": reason})
    store.remove(f"{d}/{MANIFEST}")


def remove_pass(root: Root, pass_id: int) -> None:
    """Delete a pass: its manifest first, so a reader never finds a manifest without its files."""
    store = open_store(root)
    store.remove(f"{pass_name(pass_id)}/{MANIFEST}")
    store.remove(pass_name(pass_id))


def write_worker_part(root: Root, pass_id: int, rank: int, arrays: dict[str, np.ndarray],
                      info: dict[str, Any]) -> None:
    store = open_store(root)
    d = pass_name(pass_id)
    entry = store.write_bytes(f"{d}/worker-{rank}.arrays", encode_arrays(arrays))
    store.write_json(f"{d}/worker-{rank}.json", {**info, "arrays": entry})  # last: names the arrays


def staying_ranks(root: Root, pass_id: int, ranks: list[int]) -> list[int]:
    """Ranks among ``ranks`` still training after pass ``pass_id`` (their part does not say
    they leave); the chief (rank 0), which commits for the others, when none stays. Every
    worker reads this from the parts right after the commit barrier, before the manifest
    (written later, in the background) exists."""
    store = open_store(root)
    staying = [r for r in ranks if not store.read_json(f"{pass_name(pass_id)}/worker-{r}.json").get("leaving")]
    return staying or [0]


def has_worker_part(root: Root, pass_id: int, rank: int) -> bool:
    """Worker ``rank`` has ended pass ``pass_id`` (its part is written)."""
    return open_store(root).exists(f"{pass_name(pass_id)}/worker-{rank}.json")


def commit_pass(root: Root, pass_id: int, manifest: dict[str, Any], *, ranks: list[int],
                shard_entries: list[dict[str, Any]], extra_files: dict[str, dict[str, Any]] | None = None,
                ) -> dict[str, Any]:
    """Write the manifest last: checksums of the worker parts (of ``ranks``), each shard's
    ``shard.json`` and ``extra_files`` (name in the pass directory -> entry, e.g. the cumulative
    metrics of trainer.pass_history)."""
    store = open_store(root)
    d = pass_name(pass_id)
    files: dict[str, dict[str, Any]] = {}
    for r in ranks:
        info = store.read_json(f"{d}/worker-{r}.json")
        files[f"worker-{r}.arrays"] = info["arrays"]
        files[f"worker-{r}.json"] = _entry_of(store, f"{d}/worker-{r}.json")
    for i, e in enumerate(shard_entries):
        files[f"shard-{i}/shard.json"] = e["manifest"]
    files |= extra_files or {}
    man = {**manifest, "pass": pass_id, "files": files, "shard_modes": [e["mode"] for e in shard_entries]}
    placements = [e.get("placement") for e in shard_entries]
    if placements and placements[0] is not None and all(p == placements[0] for p in placements):
        man["placement"] = placements[0]  # the virtual shards' placement the shards saved under (ps.placement)
    store.write_json(f"{d}/{MANIFEST}", man)
    if store.local is not None:
        fsync_dir(store.local)
    return man


def _entry_of(store: Store, rel: str) -> dict[str, Any]:
    import crc32c

    data = store.read_bytes(rel)
    return {"file": rel.rsplit("/", 1)[-1], "bytes": len(data), "crc32c": crc32c.crc32c(data)}


def read_pass(root: Root, pass_id: int) -> dict[str, Any]:
    """The verified manifest of a complete pass (CorruptData names the bad file)."""
    store = open_store(root)
    d = pass_name(pass_id)
    man = store.read_json(f"{d}/{MANIFEST}")
    for name, entry in man.get("files", {}).items():
        where = str(Path(d) / Path(name).parent)
        store.read_verified(where, {**entry, "file": Path(name).name})
    if man.get("pass") != pass_id:
        raise CorruptData(f"{store.url(f'{d}/{MANIFEST}')}: names pass {man.get('pass')}, not {pass_id}")
    return man


def read_worker_part(root: Root, pass_id: int, rank: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    store = open_store(root)
    d = pass_name(pass_id)
    info = store.read_json(f"{d}/worker-{rank}.json")
    arrays = decode_arrays(store.read_verified(d, info["arrays"]), store.url(f"{d}/worker-{rank}.arrays"))
    return info, arrays


def shard_placement(root: Root, pass_id: int, n_shards: int) -> tuple[Placement, Replacement | None]:
    """The placement a job of ``n_shards`` shards runs from pass ``pass_id``, and how its shards
    load the pass: None as they wrote it (same placement), else a :class:`ps.admin.Replacement`
    (the count changed, or an old pass's routing is not the placement's)."""
    man = open_store(root).read_json(f"{pass_name(pass_id)}/{MANIFEST}")
    n_saved = len(man.get("shard_modes", []))
    saved = saved_placement(man, n_saved, f"{pass_name(pass_id)}/{MANIFEST}")
    placement = placement_for(saved, n_shards)
    if saved is not None and saved.same_table(placement):
        return placement, None
    return placement, Replacement(n_saved, placement, DEFAULT_SLICE_MIN_ELEMENTS)


def chain(root: Root, pass_id: int) -> list[str]:
    """Shard templates of the complete passes up to ``pass_id``, oldest first: each shard loads
    from its newest base among them."""
    return [shard_template(root, n) for n in complete_passes(root) if n <= pass_id]


def prune(root: Root, keep: int) -> list[int]:
    """Keep the newest ``keep`` complete passes and every older one their deltas need (back to
    the newest pass where every shard saved a base); delete the rest."""
    store = open_store(root)
    done = complete_passes(store)
    kept = done[-keep:]
    if not kept:
        return []
    oldest = kept[0]
    for n in reversed([n for n in done if n <= oldest]):
        modes = store.read_json(f"{pass_name(n)}/{MANIFEST}").get("shard_modes", [])
        if modes and all(m == "base" for m in modes):
            oldest = n
            break
    else:
        return []
    gone = [n for n in done if n < oldest]
    for n in gone:
        remove_pass(store, n)
    return gone
