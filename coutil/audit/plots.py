"""Figures of the intruder's verification (Domingo-Ferrer & Muralidhar, Figures 1-3).

matplotlib is an optional extra (``pip install coutil[plot]``); it is imported only when a figure
is drawn, so the rest of coutil works without it, and a missing install is a one-line `InputError`.
The non-interactive Agg backend is used: figures are written to files, never shown.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coutil.errors import InputError
from coutil.fileio import atomic_write


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("plotting needs matplotlib: install coutil[plot]") from None
    # Agg before pyplot: no display is needed (servers, CI) and nothing pops up.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: Up to this many distances the bars stand side by side with a tick each (Figure 1 of the paper);
#: beyond, the two distributions are drawn as cumulative curves (ECDFs): a bar per integer distance over
#: thousands of distances is a comb nobody can read.
SIDE_BY_SIDE_MAX = 30
#: Figure width in inches: grows with the number of distances up to this cap, so that it stays readable.
MAX_WIDTH = 12.0


def plot_distance_distributions(
    original: Mapping[int, float],
    random: Mapping[int, float],
    path: str | Path,
    *,
    title: str = "Permutation distance of the match in Z (the release reverse-mapped onto X's values)",
    original_label: str = "original records (X)",
    random_label: str = "random records (T)",
    hellinger: float | None = None,
) -> Path:
    """Draw the two distance distributions and save to ``path``.

    Few distances: side-by-side bars of the frequency per distance; many: the two cumulative
    distributions (share of records matched at this distance or closer). ``hellinger`` is printed in
    the legend.
    The file format follows the suffix (png, pdf, svg...). Returns the path written.
    """
    target = Path(path)
    distances = sorted(set(original) | set(random))
    if not distances:
        raise InputError("nothing to plot: both distributions are empty")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    side_by_side = len(distances) <= SIDE_BY_SIDE_MAX
    width_inches = min(MAX_WIDTH, max(6.0, 0.45 * len(distances) + 2)) if side_by_side else MAX_WIDTH
    figure, axes = plt.subplots(figsize=(width_inches, 4.5))
    try:
        heights_original = [original.get(d, 0.0) for d in distances]
        heights_random = [random.get(d, 0.0) for d in distances]
        if side_by_side:
            width = 0.4
            axes.bar([d - width / 2 for d in distances], heights_original, width, label=original_label)
            axes.bar([d + width / 2 for d in distances], heights_random, width, label=random_label)
            axes.set_xticks(distances)
        else:
            cumulative_original = list(itertools.accumulate(heights_original))
            cumulative_random = list(itertools.accumulate(heights_random))
            axes.step(distances, cumulative_original, where="post", linewidth=2, label=original_label)
            axes.step(distances, cumulative_random, where="post", linewidth=2, label=random_label)
            axes.set_ylim(0, 1.02)
            axes.grid(alpha=0.3)
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("permutation distance of the match (ranks)")
        axes.set_ylabel("frequency" if side_by_side else "share matched at this distance or closer")
        axes.set_title(title, fontsize=10)
        if hellinger is not None:
            # An invisible artist puts the figure's summary into the legend box.
            axes.plot([], [], " ", label=f"Hellinger distance {hellinger:.3f}")
        axes.legend(loc="best" if side_by_side else "lower right")
        figure.tight_layout()
        try:
            # Atomic (`coutil.fileio`): the format comes from the target's suffix, not the temporary name.
            with atomic_write(target, "wb") as handle:
                figure.savefig(handle, format=target.suffix.lstrip(".").lower() or None)
        except ValueError as exc:
            raise InputError(f"{target}: cannot write the figure ({exc})") from None
    finally:
        plt.close(figure)
    return target
