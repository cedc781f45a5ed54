"""Shared test settings: small thread count, deterministic seeds, the shared data folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

# Kernel choices measured during the tests go to a throw-away folder, never to the user's cache;
# subprocesses (the CLI tests) inherit it.
os.environ["GLASSFORMER_CACHE_DIR"] = tempfile.mkdtemp(prefix="glassformer-test-cache-")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models: one thread is fastest and keeps runs comparable
    yield


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, present in CI and sessions but not for users: skip when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not available")
    return SHARED_DATA
