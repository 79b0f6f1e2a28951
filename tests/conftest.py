import json
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check behaviour, not speed: on shared, noisy machines a per-example
# deadline only makes them flaky.
settings.register_profile("im2rec", deadline=None)
settings.load_profile("im2rec")

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Golden files written by MXNet 1.9.1, copied from ../shared/golden."""
    return DATA


@pytest.fixture(scope="session")
def manifest() -> dict:
    return json.loads((DATA / "manifest.json").read_text())
