"""bench/recommend_probe.py: a marker's recommend answer proves its own vector changed only where
an item's vector provably did not (the control's score of it unchanged, same bundle version)."""

from __future__ import annotations

import numpy as np

from bench.recommend_probe import Answer, MarkerProbes, Probe, vector_changed


def answers(user: np.ndarray, control: np.ndarray, items: np.ndarray, version: int = 1) -> tuple[Answer, Answer]:
    """The top-5 answers of the two-tower score (inner product) for the marker and the control."""
    def top(vec: np.ndarray) -> Answer:
        scores = items @ vec
        best = np.argsort(-scores)[:5]
        return Answer(version, {int(i): float(scores[i]) for i in best})
    return top(user), top(control)


def probe(user: np.ndarray, control: np.ndarray, items: np.ndarray, version: int = 1) -> Probe:
    marker, ctrl = answers(user, control, items, version)
    return Probe(ctrl, marker, ctrl)


rng = np.random.default_rng(3)
ITEMS = rng.normal(size=(20, 4)).astype(np.float32)
USER, CONTROL = rng.normal(size=4).astype(np.float32), rng.normal(size=4).astype(np.float32)
CONTROL = (USER + 0.1 * CONTROL).astype(np.float32)  # a similar user: their top items overlap


def test_the_users_own_vector_change_is_seen() -> None:
    before = probe(USER, CONTROL, ITEMS)
    trained = (USER + np.float32(0.05)).astype(np.float32)
    assert vector_changed(before, probe(trained, CONTROL, ITEMS))
    assert not vector_changed(before, probe(USER, CONTROL, ITEMS))  # nothing changed


def test_an_index_swap_alone_is_not_taken_for_the_user() -> None:
    before = probe(USER, CONTROL, ITEMS)
    moved = ITEMS.copy()
    moved[np.argsort(-(ITEMS @ USER))[:5]] += np.float32(0.3)  # every item of the marker's answer moved
    assert not vector_changed(before, probe(USER, CONTROL, moved))


def test_a_bundle_swap_hides_the_change() -> None:
    before = probe(USER, CONTROL, ITEMS, version=1)
    assert not vector_changed(before, probe(USER + np.float32(0.05), CONTROL, ITEMS, version=2))


def test_marker_probes_compare_with_every_earlier_probe_of_the_version() -> None:
    history = MarkerProbes()
    assert not history.changed_with(probe(USER, CONTROL, ITEMS))  # the answer before the event
    moved = ITEMS.copy()
    moved[0] += np.float32(0.01)  # the index moved a little meanwhile
    assert not history.changed_with(probe(USER, CONTROL, moved))
    assert history.changed_with(probe(USER + np.float32(0.05), CONTROL, moved))
    assert not history.changed_with(probe(USER, CONTROL, ITEMS, version=2))  # a new bundle: compared anew
    assert len(history.probes) == 1


def test_a_shared_cold_answer_is_left_when_the_marker_gets_a_row() -> None:
    cold = Answer(1, {7: 3.0, 8: 2.0})
    history = MarkerProbes()
    assert not history.changed_with(Probe(cold, cold, cold)) and history.cold  # before the event: alike
    assert not history.changed_with(Probe(cold, cold, cold))
    warm, _ = answers(USER, CONTROL, ITEMS)
    assert not history.changed_with(Probe(cold, warm, Answer(2, cold.scores)))  # a bundle swap around it
    assert history.changed_with(Probe(cold, warm, cold))
