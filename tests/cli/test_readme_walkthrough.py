"""README "Your own data", run as written: the commands between the walkthrough markers, on a
generated ratings file, in a fresh directory. ``schema infer`` writes the config, a real
``streamrec up`` (embedded broker, 2 shards, 2 trainers, uvicorn) replays the file, and every
curl's JSON answer is checked. The quick start's calls run the same way against ``make up``'s
command (``streamrec up``, the generator). The only changes to the commands: ``up`` gets
``--plain --port P`` (a free port; no console on a pipe) and the curls ask ``127.0.0.1:P``
instead of ``localhost:8000``."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from launcher.launch import free_ports
from logrecords.hashing import LOW_MASK, slot_of
from logrecords.schema_config import SchemaConfig

pytestmark = pytest.mark.process

README = Path(__file__).resolve().parents[2] / "README.md"
BOUND_S = 150  # each step must get there within this bound (a bound, not a timing assertion)
GENRES = ["Action", "Comedy", "Drama", "Horror", "Romance", "Sci-Fi"]
N_MOVIES = 60


def block(name: str) -> list[str]:
    """The command lines of the fenced block between ``<!-- walkthrough:NAME -->`` markers."""
    m = re.search(rf"<!-- walkthrough:{name} -->\s*```\n(.*?)```\s*<!-- /walkthrough:{name} -->", README.read_text(),
                  re.S)
    assert m, f"README.md has no walkthrough:{name} block"
    return [line for line in m.group(1).splitlines() if line.strip() and not line.startswith("#")]


def write_ratings(path: Path, n: int = 6000) -> None:
    """Ratings as a movie log has them: ids as integers, attributes as strings, genres as lists, Unix time;
    users like the movies of their favourite genre."""
    rng = random.Random(7)
    movies = {m: rng.sample(GENRES, rng.randint(1, 2)) for m in range(1, N_MOVIES + 1)}
    movies[3] = ["Drama"]
    users = {u: (rng.choice(["18-24", "25-34", "35-44", "45-49"]), rng.choice("MF"), rng.choice(GENRES))
             for u in range(1, 201)}
    t = 978300000
    with open(path, "w") as f:
        for _ in range(n):
            u, m = rng.randint(1, 200), rng.randint(1, N_MOVIES)
            age, gender, favourite = users[u]
            t += rng.randint(1, 30)
            liked = int(rng.random() < (0.8 if favourite in movies[m] else 0.2))
            f.write(json.dumps({"user_id": u, "movie_id": m, "age": age, "gender": gender, "genres": movies[m],
                                "liked": liked, "timestamp": t}) + "\n")


def shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    write_ratings(tmp_path / "ratings.jsonl")

    for line in block("setup"):
        done = shell(line, tmp_path, env)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    schema = SchemaConfig.model_validate(yaml.safe_load((tmp_path / "ratings.yaml").read_text())["schema"])
    assert (schema.label, schema.user_id, schema.item_id) == ("liked", "user_id", "movie_id")
    movie_slot = schema.slot_ids()["movie_id"]

    (up_line,) = block("up")
    _serve_and_ask(up_line, block("api"), CHECKS, movie_slot, tmp_path, env)


def test_quick_start_calls_run_as_written(tmp_path: Path) -> None:
    """`make up` is `streamrec up` with the defaults: the generator's most frequent user and item."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    _serve_and_ask("streamrec up", block("quickstart"), QUICK_CHECKS, 1, tmp_path, env)


def _serve_and_ask(up_line: str, api: list[str], checks: list[Callable[[dict[str, Any], int], bool]],
                   item_slot: int, cwd: Path, env: dict[str, str]) -> None:
    """Start ``up_line`` on a free port, run each curl of ``api`` until its check passes, then Ctrl-C."""
    assert len(api) == len(checks), "each README curl needs its check here"
    (port,) = free_ports(1)
    log = cwd / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(["bash", "-c", f"exec {up_line} --plain --port {port}"], cwd=cwd, env=env,
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for line, check in zip(api, checks, strict=True):
            assert "localhost:8000" in line
            cmd = line.replace("localhost:8000", f"127.0.0.1:{port}")
            _until(up, log, cmd, lambda a, check=check: check(a, item_slot), cwd, env)
        up.send_signal(signal.SIGINT)  # Ctrl-C: a final pass, then every role stops
        try:
            code = up.wait(timeout=120)
        except subprocess.TimeoutExpired as late:
            tail = log.read_text(errors="replace")[-6000:]
            raise AssertionError(f"up did not stop within 120 s of Ctrl-C:\n{tail}") from late
        assert code == 0, log.read_text(errors="replace")[-3000:]
        # the replay may be trained and committed already: an idle job commits no further pass
        assert re.search(r"final pass (committed|skipped: nothing trained since pass [1-9])",
                         log.read_text(errors="replace"))
    finally:
        if up.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def _until(up: subprocess.Popen[bytes], log: Path, line: str, check: Callable[[Any], bool], cwd: Path,
           env: dict[str, str]) -> Any:
    """Run the curl until its answer passes ``check`` (the first bundle, then the whole replay, arrive)."""
    deadline = time.monotonic() + BOUND_S
    last: Any = None
    while time.monotonic() < deadline:
        assert up.poll() is None, f"up exited {up.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        done = shell(line, cwd, env)
        with contextlib.suppress(ValueError):
            last = json.loads(done.stdout) if done.returncode == 0 else done.stderr
            if isinstance(last, dict) and "error" not in last and check(last):
                return last
        time.sleep(1.0)
    raise AssertionError(f"not within {BOUND_S} s: {line}\nlast answer: {last}\n"
                         f"{log.read_text(errors='replace')[-3000:]}")


def _movies(answer: dict[str, Any], slot: int) -> list[int]:
    ids = np.array([i["id"] for i in answer["items"]], np.uint64)
    assert (slot_of(ids) == slot).all(), answer  # item ids of the movie_id slot
    return [int(i) & LOW_MASK for i in ids]  # int-hashed: the low 56 bits are the movie id


def _recommend(answer: dict[str, Any], slot: int) -> bool:
    movies = _movies(answer, slot)
    return len(movies) == 5 and set(movies) <= set(range(1, N_MOVIES + 1))


def _recommend_excluding(answer: dict[str, Any], slot: int) -> bool:
    return _recommend(answer, slot) and not {3, 17} & set(_movies(answer, slot))


def _similar(answer: dict[str, Any], slot: int) -> bool:
    movies = _movies(answer, slot)
    return len(movies) == 5 and 3 not in movies


def _predict(answer: dict[str, Any], slot: int) -> bool:
    return len(answer["scores"]) == 1 and 0.0 < answer["scores"][0] < 1.0


def _lookup(answer: dict[str, Any], slot: int) -> bool:
    return len(answer["ids"]) == 2 and answer["missing"] == [] and len(answer["rows"]) == 2


CHECKS = [_recommend, _recommend_excluding, _similar, _predict, _lookup]


def _any_items(answer: dict[str, Any], slot: int) -> bool:
    ids = np.array([i["id"] for i in answer["items"]], np.uint64)
    return len(ids) == 5 and bool((slot_of(ids) == slot).all())


def _generator_user(answer: dict[str, Any], slot: int) -> bool:
    return answer["ids"] == [0xAE4311FF] and answer["missing"] == []  # hex-hashed in slot 0: the value itself


def _status(answer: dict[str, Any], slot: int) -> bool:
    return answer["bundle"]["version"] >= 1


QUICK_CHECKS = [_any_items, _generator_user, _any_items, _status]
