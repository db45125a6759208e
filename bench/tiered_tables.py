"""Tables larger than their RAM budget: a table with a disk tier beside the same table all in RAM.

dim 16 with Adam state, ``--rows`` rows (the issue's figure is 40M, for a big machine), the
tiered table's RAM budget a quarter of what the all-RAM table holds. Each table runs in a
process of its own (a shard's stand-in), so its RSS is its own: RSS is sampled every 0.2 s
from before the table is made to the end, anonymous memory (the table's arrays: what the RAM
budget bounds) and file-mapped pages apart (the tier file's page cache, which the tier maps
to read and the kernel reclaims). Both get the same steps, each a 64K-key pull of one batch
and a push of another drawn apart, under a Zipf(1.1) key stream and a uniform one over the
stored ids, the two processes taking step i in turn (so a machine whose speed drifts, as a
shared one does, drifts alike under both); the first ``--warm-batches`` steps are reported
apart (cold) from the rest (steady). For the tiered table, the hit rate (keys found in RAM at
the call's start) beside the ideal one (a RAM tier as large holding the most drawn keys), disk
reads a batch, and keys/s by the calling thread's CPU time beside wall time (the CPU ratio
leaves out waits for the disk; wall time holds them). The disk's own random-read rate
is probed in the same run (4 KiB O_DIRECT reads at random offsets of a file as large as the
tier's). ``--drop-caches`` empties the page cache before the tiered table's uniform phase (root;
other users drop the tier file's pages alone).
``--train``: the training run instead (:mod:`bench.tiered_training`).
Run: ``python -m bench.tables --tiered [--rows N] [--train] [--json]``.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing as mp
import os
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import print_result, tiered_training
from bench.table_streams import frozen_heap, key_batches, rss_bytes
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, OptimizerConfig, TableConfig

DIM = 16
ZIPF_A = 1.1  # bench.table_streams.key_batches' exponent


def config(ram_bytes: int | None, tier_dir: Path | None, low_water: float | None = None) -> TableConfig:
    return TableConfig(name="bench", dim=DIM, optimizer=OptimizerConfig(kind="adam", lr=1e-3),
                       eviction=EvictionConfig(max_bytes=ram_bytes),
                       tier=tiered_training.tier_config(None if tier_dir is None else str(tier_dir), low_water))


def rss_parts() -> tuple[int, int]:
    """(anonymous, file-mapped) resident bytes: the table's own arrays are anonymous memory,
    file-mapped pages are page cache the kernel can reclaim."""
    rss_bytes()  # hands freed heap pages back first
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["RssAnon"].split()[0]) * 1024, int(fields["RssFile"].split()[0]) * 1024


class RssSampler:
    def __init__(self, every_s: float = 0.2) -> None:
        self.samples: list[tuple[float, int, int]] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.samples.append((time.perf_counter() - self.t0, *rss_parts()))

    def stop(self) -> list[tuple[float, int, int]]:
        self._stop.set()
        self._thread.join()
        return self.samples


COUNTED = ("disk_reads", "promoted", "demoted")  # the tier's counters each phase reports


def phase_counts(table: SparseTable) -> dict[str, int]:
    st = table.stats()
    return {k: st.get(k, 0) for k in COUNTED}


def warm_up(tier_dir: str | None) -> None:
    """Compile (or load) the kernels first, the disk tier's too: the compiler's memory is not the table's."""
    warm = SparseTable(config(None, None) if tier_dir is None else config(1 << 16, Path(tier_dir)))
    keys = np.arange(1, 4097, dtype=np.uint64)
    warm.push(keys, np.zeros((keys.shape[0], DIM), np.float32))  # past a 64 KB budget: demotions
    warm.pull(keys)  # reads in place
    warm.pull(keys)  # promotions: a second read
    if warm.tier is not None:
        warm.tier.close()


def drop_page_cache(tier_file: Path) -> str:
    """Empty the page cache (root), else drop the tier file's pages from it (``fadvise``, any
    user: what the cold phase needs); returns which was done."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "all (/proc/sys/vm/drop_caches)"
    except OSError as e:
        fd = os.open(tier_file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return f"the tier file's pages only (fadvise DONTNEED; writing /proc/sys/vm/drop_caches: {e.strerror})"


def ideal_hit_rates(kind: str, n_keys: int, ram_rows: int, batch: int) -> dict[str, float]:
    """The hit rates of a RAM tier holding exactly the ``ram_rows`` most drawn keys (a static,
    perfect choice) for ``key_batches`` streams: for a pull, the share of key draws that fall
    in them; for a push (its unique keys), the share of a batch's distinct keys."""
    if kind == "uniform":
        share = min(1.0, ram_rows / n_keys)
        return {"pull": share, "push": share}
    p = np.arange(1, n_keys + 1, dtype=np.float64) ** -ZIPF_A  # key_batches' Zipf, cut at the table's size
    p /= p.sum()
    seen = -np.expm1(batch * np.log1p(-p))  # chance a key is in a batch of ``batch`` draws
    r = min(ram_rows, n_keys)
    return {"pull": float(p[:r].sum()), "push": float(seen[:r].sum() / seen.sum())}


def ram_share(table: SparseTable, keys: np.ndarray, *, unique: bool) -> tuple[int, int]:
    """(keys found in the RAM tier, keys): of every draw, or of the distinct keys (a push's
    unit); read before the call, outside the timing."""
    if unique:
        keys = np.unique(keys)
    return int(np.count_nonzero(table.state.lookup(keys) >= 0)), int(keys.shape[0])


def table_keys(n_rows: int, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.arange(1, n_rows + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def fill(table: SparseTable, keys: np.ndarray, grads: np.ndarray) -> None:
    batch = grads.shape[0]
    for s in range(0, keys.shape[0], batch):
        table.push(keys[s : s + batch], grads[: min(batch, keys.shape[0] - s)])


def all_ram_bytes(n_rows: int, batch: int) -> int:
    """What the all-RAM table holds once filled (the tiered table's budget is a quarter of it)."""
    table = SparseTable(config(None, None))
    fill(table, table_keys(n_rows, np.random.default_rng(7)), np.full((batch, DIM), 1e-3, np.float32))
    return int(table.stats()["bytes"])


def run_table(n_rows: int, batch: int, n_batches: int, n_warm: int, ram_bytes: int | None,
              tier_dir: str | None, drop_caches: bool, low_water: float | None = None,
              gate: Any = None) -> dict[str, Any]:
    """In a process of its own: fill a table, then, per key stream, ``n_warm + n_batches``
    steps of a pull of one batch and a push of another (drawn apart, same distribution);
    the first ``n_warm`` steps are the cold figure, the rest the steady state. ``gate``: called
    before each step, waits for this process's turn (:func:`in_lockstep`)."""
    warm_up(tier_dir)
    rng = np.random.default_rng(7)
    keys = table_keys(n_rows, rng)
    grads = np.full((batch, DIM), 1e-3, np.float32)
    steps = n_warm + n_batches
    streams = {kind: {op: key_batches(kind, keys, batch, steps, rng) for op in ("pull", "push")}
               for kind in ("zipf", "uniform")}
    anon0, file0 = rss_parts()  # the benchmark's own arrays are made: what grows from here is the table's
    sampler = RssSampler()
    table = SparseTable(config(ram_bytes, Path(tier_dir) if tier_dir else None, low_water))
    t = time.perf_counter()
    fill(table, keys, grads)
    out: dict[str, Any] = {"fill_keys_per_s": n_rows / (time.perf_counter() - t), "phases": {}}
    calls = {"pull": table.pull, "push": lambda k, t=table: t.push(k, grads[: k.shape[0]])}
    with frozen_heap():
        for kind in ("zipf", "uniform"):
            if kind == "uniform" and drop_caches and table.tier is not None:
                out["cache_dropped"] = drop_page_cache(table.tier.disk.path)
            acc = {(regime, op): {"keys": 0, "secs": 0.0, "cpu": 0.0, "faults": 0, "hits": 0, "of": 0,
                                  **dict.fromkeys(COUNTED, 0)}
                   for regime in ("cold", "steady") for op in ("pull", "push")}
            for i in range(steps):
                regime = "cold" if i < n_warm else "steady"
                if gate is not None:
                    gate()
                for op in ("pull", "push"):
                    b = streams[kind][op][i]
                    a = acc[regime, op]
                    hits, of = ram_share(table, b, unique=op == "push")
                    before = phase_counts(table)
                    use = resource.getrusage(resource.RUSAGE_THREAD)
                    t, cpu = time.perf_counter(), time.thread_time()
                    calls[op](b)
                    a["secs"] += time.perf_counter() - t
                    a["cpu"] += time.thread_time() - cpu
                    used = resource.getrusage(resource.RUSAGE_THREAD)
                    a["faults"] += used.ru_minflt + used.ru_majflt - use.ru_minflt - use.ru_majflt
                    after = phase_counts(table)
                    a["keys"] += b.shape[0]
                    a["hits"] += hits
                    a["of"] += of
                    for k in COUNTED:
                        a[k] += after[k] - before[k]
            res: dict[str, Any] = {"ram_rows": table.state.rows.n}
            for (regime, op), a in acc.items():
                if a["keys"] == 0:
                    continue
                res.setdefault(regime, {})[op] = {
                    "keys_per_s": a["keys"] / a["secs"], "keys_per_cpu_s": a["keys"] / max(a["cpu"], 1e-9),
                    "faults_per_batch": a["faults"] / a["keys"] * batch,
                    "disk_reads_per_s": a["disk_reads"] / a["secs"], "disk_reads_per_batch": a["disk_reads"] / a["keys"]
                    * batch, "hit_rate": a["hits"] / a["of"], "promoted": a["promoted"], "demoted": a["demoted"]}
            out["phases"][kind] = res
    samples = sampler.stop()
    st = table.stats()
    out.update(rows=table.size(), ram_rows=st["rows"], disk_rows=st.get("disk_rows", 0),
               ram_table_bytes=st["bytes"] + st.get("disk_index_bytes", 0), disk_bytes=st.get("disk_bytes", 0),
               ram_row_limit=table.budget.ram_row_limit(),
               rss_before_table=anon0 + file0,
               rss_samples=[(round(s, 1), a - anon0, f - file0) for s, a, f in samples],
               max_table_anon_rss=max(a for _, a, _ in samples) - anon0,
               max_table_rss=max(a + f for _, a, f in samples) - anon0 - file0,
               end_table_anon_rss=rss_parts()[0] - anon0)
    return out


def in_process(fn: Any, *args: Any) -> Any:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def _stepped(conn: Any, fn: Any, args: tuple[Any, ...]) -> None:
    """A child of :func:`in_lockstep`: ``fn`` taking a step only when told to."""

    def gate() -> None:
        conn.send("ready")
        conn.recv()

    try:
        conn.send(("result", fn(*args, gate=gate)))
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
        raise


def in_lockstep(fn: Any, *runs: tuple[Any, ...]) -> list[dict[str, Any]]:
    """``fn(*args, gate=...)`` (:func:`run_table`, or a training run) of each argument tuple in
    a process of its own (its RSS its own), the processes taking their steps in turn: step i
    of the first, then of the second, and so on, so the machine's state (other load, the host's
    caches and clock) drifts alike under every table and the ratios of their CPU times compare
    like with like. ``fn`` calls ``gate`` before each step."""
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for args in runs:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_stepped, args=(child, fn, args))
        proc.start()
        conns.append(parent)
        procs.append(proc)
    try:
        msgs = [c.recv() for c in conns]  # each has made and filled its table
        while any(m == "ready" for m in msgs):
            for i, c in enumerate(conns):
                if msgs[i] == "ready":
                    c.send("go")
                    msgs[i] = c.recv()  # ready for its next step, or its result
        errors = [m[1] for m in msgs if m[0] == "error"]
        if errors:
            raise RuntimeError("; ".join(errors))
        return [m[1] for m in msgs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


def random_read_probe(path: Path, nbytes: int, seconds: float = 3.0) -> float:
    """The disk's own 4 KiB random reads/s (O_DIRECT: the page cache plays no part)."""
    block = 4096
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(max(1, nbytes >> 20)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    blocks = max(1, (nbytes >> 20) << 8)
    rng = np.random.default_rng(3)
    n, t = 0, time.perf_counter()
    try:
        while time.perf_counter() - t < seconds:
            for off in rng.integers(0, blocks, 256).tolist():
                os.preadv(fd, [buf], off * block)
            n += 256
        return n / (time.perf_counter() - t)
    finally:
        os.close(fd)
        buf.close()
        path.unlink()


def run(n_rows: int, batch: int, n_batches: int, n_warm: int, workdir: Path, drop_caches: bool,
        low_water: float | None = None) -> dict[str, Any]:
    budget = in_process(all_ram_bytes, n_rows, batch) // 4
    ram, tiered = in_lockstep(run_table, (n_rows, batch, n_batches, n_warm, None, None, False),
                              (n_rows, batch, n_batches, n_warm, budget, str(workdir / "tier"), drop_caches,
                               low_water))
    probe = random_read_probe(workdir / "probe", max(tiered["disk_bytes"], 64 << 20))
    ratios: dict[str, dict[str, float]] = {}
    for kind in ("zipf", "uniform"):
        for regime in ("cold", "steady"):
            if regime not in tiered["phases"][kind]:
                continue
            for op in ("pull", "push"):
                a, b = ram["phases"][kind][regime][op], tiered["phases"][kind][regime][op]
                ratios[f"{kind}_{regime}_{op}"] = {"wall": b["keys_per_s"] / a["keys_per_s"],
                                                   "cpu": b["keys_per_cpu_s"] / a["keys_per_cpu_s"]}
        tiered["phases"][kind]["ideal_hit_rate"] = ideal_hit_rates(kind, n_rows, tiered["phases"][kind]["ram_rows"],
                                                                   batch)
    return {"low_water": tiered_training.low_water_of(low_water),
            "rows": n_rows, "batch_keys": batch, "batches": n_batches, "warm_batches": n_warm,
            "ram_budget_bytes": budget, "all_ram": ram, "tiered": tiered,
            "tiered_vs_all_ram": ratios, "disk_random_reads_per_s": probe,
            "drop_caches": drop_caches,
            "max_anon_rss_vs_budget": tiered["max_table_anon_rss"] / budget,
            "max_rss_vs_budget": tiered["max_table_rss"] / budget}


def report(r: dict[str, Any]) -> None:
    ram, tiered = r["all_ram"], r["tiered"]
    print(f"dim {DIM} Adam, {r['rows']:,} rows, {r['batch_keys']:,}-key batches; tiered RAM budget "
          f"{r['ram_budget_bytes'] / 1e6:.0f} MB = a quarter of the all-RAM table's "
          f"{ram['ram_table_bytes'] / 1e6:.0f} MB, tier low_water {r['low_water']}")
    print(f"tiered: {tiered['ram_rows']:,} rows in RAM (row limit {tiered['ram_row_limit']:,}), "
          f"{tiered['disk_rows']:,} on disk ({tiered['disk_bytes'] / 1e6:.0f} MB file)")
    print(f"each step pulls one batch and pushes another, drawn apart from the same distribution; cold: the first "
          f"{r['warm_batches']} steps after the fill (for zipf) or after zipf (for uniform), steady: the next "
          f"{r['batches']}")
    print("hit rate: keys found in RAM when the call starts (pull: of every key drawn; push: of its distinct keys); "
          "ideal: a RAM tier of as many rows holding the most drawn keys")
    print(f"{'keys':8} {'phase':6} {'op':5} {'all-RAM keys/s':>15} {'tiered keys/s':>14} {'ratio':>6} "
          f"{'CPU ratio':>10} {'hit rate':>9} {'ideal':>6} {'disk reads/batch':>17}")
    for kind in ("zipf", "uniform"):
        ph = tiered["phases"][kind]
        for regime in ("cold", "steady"):
            if regime not in ph:
                continue
            for op in ("pull", "push"):
                a, b = ram["phases"][kind][regime][op], ph[regime][op]
                q = r["tiered_vs_all_ram"][f"{kind}_{regime}_{op}"]
                print(f"{kind:8} {regime:6} {op:5} {a['keys_per_s']:15,.0f} {b['keys_per_s']:14,.0f} "
                      f"{q['wall']:5.2f}x {q['cpu']:9.2f}x {b['hit_rate']:9.3f} {ph['ideal_hit_rate'][op]:6.3f} "
                      f"{b['disk_reads_per_batch']:17,.0f}")
    print("targets: zipf steady pull and push >= 0.5x all-RAM (CPU ratio: keys per second of the calling thread's "
          "CPU, steadier than wall time on a shared machine; it leaves out waits for the disk)")
    print(f"disk's own 4 KiB random reads (O_DIRECT probe): {r['disk_random_reads_per_s']:,.0f}/s"
          + (f" (page cache dropped before the tiered uniform phase: {tiered.get('cache_dropped')})"
             if r["drop_caches"] else " (page cache warm)"))

    def faults(kind: str, op: str) -> str:
        a, b = ram["phases"][kind]["steady"][op], tiered["phases"][kind]["steady"][op]
        return f"{kind} {op} {a['faults_per_batch']:,.0f} / {b['faults_per_batch']:,.0f}"

    print("steady page faults a call (in the calling thread: the tier file's pages mapped or first written, the "
          "call's new arrays), all-RAM / tiered: "
          + ", ".join(faults(kind, op) for kind in ("zipf", "uniform") for op in ("pull", "push")))
    probe = r["disk_random_reads_per_s"]
    uni = tiered["phases"]["uniform"]
    print("tiered disk-row reads/s, uniform keys: " + ", ".join(
        f"{regime} {op} {uni[regime][op]['disk_reads_per_s']:,.0f} ({uni[regime][op]['disk_reads_per_s'] / probe:.1f}x "
        "the probe's rate)" for regime in ("cold", "steady") if regime in uni for op in ("pull", "push"))
          + ("" if r["drop_caches"] else "; from the page cache, which holds the whole tier file here"))
    print("table RSS (process RSS minus before the table), tiered: anonymous (what the RAM budget bounds) max "
          f"{tiered['max_table_anon_rss'] / 1e6:.0f} MB = {r['max_anon_rss_vs_budget']:.2f}x of its budget "
          "(target <= 1.10x), end "
          f"{tiered['end_table_anon_rss'] / 1e6:.0f} MB; with the mapped tier file's page-cache pages (reclaimable) "
          f"max {tiered['max_table_rss'] / 1e6:.0f} MB = {r['max_rss_vs_budget']:.2f}x; all-RAM max "
          f"{ram['max_table_rss'] / 1e6:.0f} MB")
    step = max(1, len(tiered["rss_samples"]) // 12)
    print("tiered table RSS over time (s: anonymous + file-mapped MB): " + ", ".join(
        f"{s:.0f}: {a / 1e6:.0f}+{f / 1e6:.0f}" for s, a, f in tiered["rss_samples"][::step]))


def hidden_sizes(text: str) -> tuple[int, ...]:
    """``--mlp``: comma-separated positive layer sizes."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive layer sizes (e.g. 400,400,400), "
                                         f"got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows of each table (the issue's: 40M)")
    ap.add_argument("--batch-keys", type=int, default=65536)
    ap.add_argument("--batches", type=int, default=200,
                    help="steady-state steps (a pull and a push each) per key stream")
    ap.add_argument("--warm-batches", type=int, default=400,
                    help="steps before them, reported apart as the cold figure: the RAM tier takes the hot rows "
                         "as pulls read them, so its hit rate climbs for a few hundred steps")
    ap.add_argument("--dir", type=Path, default=None, help="where the disk tier lives (default: a temp dir)")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before the cold phase (root)")
    ap.add_argument("--low-water", type=float, default=None,
                    help="the tier's low_water (default: its config default): a demotion moves RAM rows to disk "
                         "until RAM holds this share of its row limit")
    ap.add_argument("--train", action="store_true", help="the training run instead (bench.tiered_training)")
    ap.add_argument("--train-rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--fields", type=int, default=8)
    ap.add_argument("--ids", type=int, default=500_000, help="ids per field (Zipf(1.1) over them)")
    ap.add_argument("--train-batch", type=int, default=4096)
    ap.add_argument("--mlp", type=hidden_sizes, default=(),
                    help="hidden sizes of the training run's deep part, e.g. 400,400,400 (bench/train.py's; "
                         "default none: the logistic model, where the table is the whole step)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-tiered-", dir=args.dir) as d:
        if args.train:
            result = tiered_training.run(args.train_rows, args.test_rows, args.fields, args.ids, args.train_batch,
                                         Path(d), in_process, in_lockstep, args.low_water, args.mlp)
            return print_result(result, as_json=args.json, table=tiered_training.report)
        result = run(args.rows, args.batch_keys, args.batches, args.warm_batches, Path(d), args.drop_caches,
                     args.low_water)
    return print_result(result, as_json=args.json, table=report)


if __name__ == "__main__":
    raise SystemExit(main())
