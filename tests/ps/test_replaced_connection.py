"""A client that reconnects under its routing id leaves what was still queued on its old connection
to arrive under the name the shard's ROUTER gave that connection, signed for the old one. The shard
counts such a refusal under its own code and says it at info level (the client resends the request),
so a start under load logs no warnings; any other refusal still warns and counts under its code."""

from __future__ import annotations

import logging

import pytest

from core.errors import Forbidden
from ps.shard_requests import REPLACED_CONNECTION, RefusalLog


def test_a_refusal_on_a_replaced_connection_is_counted_apart_and_logged_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("tests.replaced_connection")
    refusals = RefusalLog(log, "shard 0")
    with caplog.at_level(logging.INFO, logger=log.name):
        refusals.refused(Forbidden("request signature does not match (on a replaced connection)",
                                   detail={REPLACED_CONNECTION: True}))
        refusals.refused(Forbidden("request signature does not match the shared secret and this connection"))
    assert refusals.counts == {REPLACED_CONNECTION: 1, "forbidden": 1}
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels[0][0] == "INFO" and "dropped a request" in levels[0][1]
    assert levels[1][0] == "WARNING" and "refused a request" in levels[1][1]
    assert len(levels) == 2
