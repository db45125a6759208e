"""The console's Bayes-optimal AUC is drawn off the main thread: a stop asked for while it is
being computed is not kept waiting for it."""

from __future__ import annotations

from launcher.up_source import bayes_auc, bayes_auc_unless_stopped


def test_the_reference_auc_is_the_planted_streams_and_a_stop_does_not_wait_for_it() -> None:
    assert bayes_auc_unless_stopped(3, 0.0, lambda: False) == bayes_auc(3, 0.0)
    assert bayes_auc_unless_stopped(3, 0.0, lambda: True) is None  # asked before the sample was drawn
