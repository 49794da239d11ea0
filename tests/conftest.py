"""Shared pytest fixtures: paths to the reference data kept in tests/data (see tests/data/README.md).

The data live inside the repository so that no test depends on anything beside the checkout: a
missing file is a failure, never a skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Reference data copied into the repository, with their provenance in tests/data/README.md.
DATA = Path(__file__).resolve().parent / "data"
RUNNING_EXAMPLE = DATA / "running-example"
SDCMICRO = DATA / "sdcmicro"


def _need(path: Path) -> Path:
    """The path of a file or folder of tests/data; fails (does not skip) when it is missing."""
    if not path.exists():
        pytest.fail(f"test data not found at {path}: tests/data is part of the repository (see its README.md)")
    return path


@pytest.fixture
def running_example() -> Path:
    """Folder with X.csv, Y.csv, Z.csv of Table 1 of Domingo-Ferrer & Muralidhar."""
    folder = _need(RUNNING_EXAMPLE)
    for name in ("X.csv", "Y.csv", "Z.csv"):
        _need(folder / name)
    return folder


@pytest.fixture
def census_csv() -> Path:
    """sdcMicro's CASCrefmicrodata ("Census"): 1080 records x 13 numeric attributes."""
    return _need(SDCMICRO / "CASCrefmicrodata.csv")


@pytest.fixture
def tarragona_csv() -> Path:
    """sdcMicro's Tarragona: 834 records x 13 numeric attributes."""
    return _need(SDCMICRO / "Tarragona.csv")
