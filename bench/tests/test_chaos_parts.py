"""The building blocks of bench/chaos.py: a pass whose records grew by more (less) than its
offsets advanced double-counted (lost) the difference; a manifest that fails verification is
corrupt, one pruned before it was read is not; service failures inside an excused window
(no bundle yet, a service restart) do not count against the error rate."""

from __future__ import annotations

from pathlib import Path

from bench.chaos_parts import PassWatcher, Probe, auc_comparison, service_errors
from core.atomic_files import write_json
from trainer import checkpoints


def commit(root: Path, pass_id: int, records_total: int, offsets: dict[str, int], *, names: int | None = None) -> None:
    d = checkpoints.pass_dir(root, pass_id)
    d.mkdir(parents=True)
    write_json(d / checkpoints.MANIFEST, {"pass": names or pass_id, "files": {}, "created_at": float(pass_id),
                                                 "records_total": records_total, "offsets": offsets,
                                                 "progress": {"auc_total": 0.6}})


def test_records_against_offsets_pass_by_pass_and_corrupt_manifests(tmp_path: Path) -> None:
    watcher = PassWatcher(tmp_path)
    commit(tmp_path, 1, 100, {"0": 60, "1": 40})
    watcher.poll()
    commit(tmp_path, 2, 250, {"0": 120, "1": 80})  # 150 counted for 100 consumed: 50 twice
    commit(tmp_path, 3, 400, {"0": 200, "1": 200})  # 150 counted for 200 consumed: 50 lost
    commit(tmp_path, 4, 400, {"0": 200, "1": 200}, names=9)  # the manifest names another pass
    watcher.poll()
    assert (watcher.duplicates, watcher.losses) == (50, 50)
    assert watcher.verified == 3 and len(watcher.corrupt) == 1 and "pass 4" in watcher.corrupt[0]
    assert watcher.newest is not None and (watcher.newest.records_total, watcher.newest.consumed) == (400, 400)


def test_service_failures_are_excused_only_inside_the_windows() -> None:
    probes = [Probe(1.0, "/readyz", 503), Probe(2.0, "/readyz", 200), Probe(3.0, "/v1/embeddings:lookup", 200),
              Probe(4.0, "/readyz", 0), Probe(5.0, "/readyz", 200), Probe(6.0, "/v1/embeddings:lookup", 500),
              Probe(7.0, "/v1/embeddings:lookup", 422)]
    got = service_errors(probes, excused=[(0.0, 2.0), (4.0, 5.0)])
    assert got["requests"] == 7 and got["requests_outside_restarts"] == 3
    assert got["errors_outside_restarts"] == 1 and got["errors_during_restarts"] == 2
    assert got["client_errors_4xx"] == 1


def test_the_chaos_auc_is_compared_with_the_mean_of_the_no_kill_runs() -> None:
    one = auc_comparison(0.61, [0.6])
    assert one["difference"] == 0.01 and one["no_kills_spread"] is None and one["no_kills_mean"] == 0.6
    two = auc_comparison(0.6, [0.59, 0.63, None])
    assert two["no_kills_mean"] == 0.61 and two["no_kills_spread"] == 0.04 and two["difference"] == -0.01
    assert auc_comparison(None, [0.6])["difference"] is None and auc_comparison(0.6, [None])["difference"] is None
