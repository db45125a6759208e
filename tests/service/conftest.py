from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, make_settings, random_items, started


@pytest.fixture
def builder(tmp_path: Path) -> BundleBuilder:
    """A base bundle (version 1) with user and item rows and 300 item vectors."""
    b = BundleBuilder(tmp_path / "exports")
    b.push("user", USER_IDS)
    b.push("item", ITEM_IDS)
    b.export("base", items=random_items(np.random.default_rng(1), 300, b.model.tower_dim),
             newest_record_time=time.time() - 3.0)
    return b


@pytest.fixture
def client(builder: BundleBuilder) -> Iterator[TestClient]:
    with started(make_settings(builder.root)) as c:
        yield c


