"""Figures of the intruder's verification (Domingo-Ferrer & Muralidhar, Figures 1-3).

matplotlib is an optional extra (``pip install coutil[plot]``); it is imported only when a figure
is drawn, so the rest of coutil works without it, and a missing install is a one-line `InputError`.
The non-interactive Agg backend is used: figures are written to files, never shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coutil.errors import InputError


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("plotting needs matplotlib: install coutil[plot]") from None
    # Agg before pyplot: no display is needed (servers, CI) and nothing pops up.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_distance_distributions(
    original: Mapping[int, float],
    random: Mapping[int, float],
    path: str | Path,
    *,
    title: str = "Permutation distance of the match in Z",
    original_label: str = "original records (X)",
    random_label: str = "random records (T)",
) -> Path:
    """Draw the two distance distributions as side-by-side bars per distance and save to ``path``.

    The file format follows the suffix (png, pdf, svg...). Returns the path written.
    """
    target = Path(path)
    distances = sorted(set(original) | set(random))
    if not distances:
        raise InputError("nothing to plot: both distributions are empty")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(6.0, 0.45 * len(distances) + 2), 4.0))
    try:
        width = 0.4
        positions = range(len(distances))
        axes.bar(
            [p - width / 2 for p in positions],
            [original.get(d, 0.0) for d in distances],
            width,
            label=original_label,
        )
        axes.bar(
            [p + width / 2 for p in positions],
            [random.get(d, 0.0) for d in distances],
            width,
            label=random_label,
        )
        axes.set_xticks(list(positions))
        axes.set_xticklabels([str(d) for d in distances])
        axes.set_xlabel("permutation distance")
        axes.set_ylabel("frequency")
        axes.set_title(title)
        axes.legend()
        figure.tight_layout()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(target)
        except (OSError, ValueError) as exc:
            raise InputError(f"{target}: cannot write the figure ({exc})") from None
    finally:
        plt.close(figure)
    return target
