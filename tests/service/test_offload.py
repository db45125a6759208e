"""A request's heavy work runs off the event loop: while large raw /v1/predict requests hash in
worker threads under real uvicorn, /healthz answers; the answers equal the one of the same
request alone; and the work is bounded (past work_threads + work_queue, 503 at once, counted)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from core.errors import Unavailable
from service.offload import INLINE_BODY_BYTES, Offload

from .service_support import make_settings, started, wait_until
from .test_raw_values import RAW_USER, SCHEMA, _bundle
from .uvicorn_support import metric, serving

GENRES = ["Comedy", "Drama", "Action", "Film-Noir", "Sci-Fi"]


def _big_predict() -> bytes:
    """64 raw instances (on the loop by count) with long genre lists: megabytes to decode and hash."""
    instances = [{"user_id": i + 1, "age": "18-24", "movie_id": i % 60 + 1, "genres": GENRES * 1200}
                 for i in range(64)]
    return json.dumps({"instances": instances}).encode()


@pytest.mark.process
def test_healthz_answers_while_large_raw_predicts_hash(tmp_path: Path) -> None:
    b = _bundle(tmp_path / "exports", SCHEMA.model_dump(mode="json"))
    body = _big_predict()
    assert len(body) > 1 << 20
    headers = {"content-type": "application/json"}
    with serving(tmp_path, b.root, limits={"work_threads": 1}) as base:
        alone = httpx.post(f"{base}/v1/predict", content=body, headers=headers, timeout=120)
        assert alone.status_code == 200, alone.text
        answers: list[httpx.Response] = []
        stop = threading.Event()

        def send() -> None:  # big predicts back to back, two at a time, until the checks are done
            with httpx.Client(timeout=120) as c:
                while not stop.is_set() and len(answers) < 200:
                    answers.append(c.post(f"{base}/v1/predict", content=body, headers=headers))

        senders = [threading.Thread(target=send, daemon=True) for _ in range(2)]
        for t in senders:
            t.start()
        healthy_during_work = 0

        def healthz_between_work() -> bool:
            # a /healthz answered between two scrapes that both saw a predict's hashing in a worker
            # thread: the event loop served it while that work was in progress
            nonlocal healthy_during_work
            if metric(base, "streamrec_work_in_progress") >= 1:
                assert httpx.get(f"{base}/healthz", timeout=60).status_code == 200
                if metric(base, "streamrec_work_in_progress") >= 1:
                    healthy_during_work += 1
            return healthy_during_work >= 1

        try:
            wait_until(healthz_between_work, timeout=240, what="/healthz answered while predicts hash")
        finally:
            stop.set()
            for t in senders:
                t.join(timeout=240)
        assert answers and all(r.status_code == 200 for r in answers), [r.text[:200] for r in answers[:3]]
        assert all(r.json() == alone.json() for r in answers)  # nothing lost or changed under load
        assert metric(base, "streamrec_work_refused_total") == 0


def test_work_past_threads_and_queue_is_refused_at_once() -> None:
    async def run() -> None:
        off = Offload(threads=1, queue=1)
        release = threading.Event()
        running = [asyncio.create_task(off.run(release.wait, 60)) for _ in range(2)]  # one runs, one waits
        while off.in_progress < 2:
            await asyncio.sleep(0)
        with pytest.raises(Unavailable, match="busy: 2 requests' work"):
            await off.run(int, "3")
        assert off.refused == 1
        release.set()
        assert await asyncio.gather(*running) == [True, True]
        assert off.in_progress == 0 and await off.run(int, "3") == 3  # room again

    asyncio.run(run())


def test_large_bodies_take_the_worker_path_with_the_same_answers(tmp_path: Path) -> None:
    b = _bundle(tmp_path / "exports", SCHEMA.model_dump(mode="json"))
    with started(make_settings(b.root)) as c:
        instances = [{**RAW_USER, "movie_id": i % 60 + 1, "genres": GENRES * 40} for i in range(200)]
        assert len(json.dumps({"instances": instances})) > INLINE_BODY_BYTES  # decoded and hashed in a worker
        big = c.post("/v1/predict", json={"instances": instances})
        assert big.status_code == 200, big.text
        alone = [c.post("/v1/predict", json={"instances": [x]}).json()["scores"][0] for x in instances[::50]]
        np.testing.assert_allclose(big.json()["scores"][::50], alone, rtol=1e-5)
        want = c.post("/v1/recommend", json={"user": RAW_USER, "k": 5}).json()
        far = list(range(1 << 40, (1 << 40) + 10_000))  # ids no item has: excluding them changes nothing
        assert len(json.dumps(far)) > INLINE_BODY_BYTES
        assert c.post("/v1/recommend", json={"user": RAW_USER, "k": 5, "exclude": far}).json() == want
