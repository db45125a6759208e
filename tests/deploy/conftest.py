"""Shared processes of the deploy tests: one embedded broker (tansu) per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streaming.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b
