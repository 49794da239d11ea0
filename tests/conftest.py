"""Shared pytest fixtures: paths to the shared reference data and small helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: ../shared next to the checkout (also present beside CI's fresh clone).
SHARED = REPO.parent / "shared"
RUNNING_EXAMPLE = SHARED / "papers" / "running-example"
SDCMICRO = SHARED / "datasets" / "sdcmicro"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"reference data not found at {path} (the ../shared folder beside the checkout)")
    return path


@pytest.fixture
def running_example() -> Path:
    """Folder with X.csv, Y.csv, Z.csv of Table 1 of Domingo-Ferrer & Muralidhar."""
    return _need(RUNNING_EXAMPLE)


@pytest.fixture
def census_csv() -> Path:
    return _need(SDCMICRO / "CASCrefmicrodata.csv")


@pytest.fixture
def tarragona_csv() -> Path:
    return _need(SDCMICRO / "Tarragona.csv")
