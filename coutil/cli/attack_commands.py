"""`coutil attack` and `coutil reverse-map`: linking the original to a release, and Algorithm 1.

- ``attack``: the maximum-knowledge intruder (Section 5): linkages to the reverse-mapped release,
  verification with random records, Hellinger distance, p-values, optional figure. ``--method``
  runs a classical attack instead: distance-based linkage, global one-to-one linkage, or the
  rank-swapping intersection attack.
- ``reverse-map``: Algorithm 1, writing Z as CSV (non-selected columns copied from the release).

X and Y are read through `coutil.audit.inputs`, as by `coutil audit` (`coutil.cli.audit_commands`;
the shared options and loading are in `coutil.cli.common`): columns found by name, or by position
when the release has none of X's names, with a note on stderr; ``--release-columns`` to pair
differently named ones, ``--ordinal`` for ordinal categorical columns, ``--k``. A known record
mapping f (``attack --true-mapping``) is ``identity``, ``column:NAME`` (a release column holding each
row's 1-based original record) or a file with one 1-based release row per original record. Progress
bars show only on a terminal and never with ``--json``.

Every ``--json`` prints one JSON object on stdout; the keys are the documented interface. Row
numbers in output are 1-based (as in the paper's tables); the Python API is 0-based.
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.table import Table

from coutil.audit.inputs import load_mapping, parse_random_spec, renamed_ordinal
from coutil.cli.common import (
    AUDIT_TABLE_ROWS,
    AuditColumnsOpt,
    AuditJsonOpt,
    AuditOrdinalOpt,
    AuditReleaseColumnsOpt,
    AuditReleaseOpt,
    OneLineErrorsCommand,
    announce_pair,
    emit_json,
    err_console,
    load_checked_pair,
    progress,
    show_progress,
    stderr_line,
)
from coutil.errors import InputError
from coutil.fileio import refuse_overwriting_inputs
from coutil.sdc.dataset import Dataset, replace_columns, write_csv

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from coutil.audit.intruder import RandomSpec

    KnownMapping = str | NDArray[np.intp] | None


class Method(StrEnum):
    """Attack run by ``coutil attack``."""

    intruder = "intruder"
    distance = "distance"
    global_ = "global"
    intersection = "intersection"


class Metric(StrEnum):
    """Distance of the distance-based and global linkages."""

    euclidean = "euclidean"
    mahalanobis = "mahalanobis"


ForceOpt = Annotated[bool, typer.Option("--force", help="Write the output even when it is one of the input files "
                                        "(they are read whole first; the output is replaced atomically).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for tie-breaking and random records.")]
KOpt = Annotated[
    int | None, typer.Option("--k", help="Reject a release with fewer than k rows.", show_default=False)
]


def _mapping_file(spec: str | None) -> Path | None:
    """The file of a --true-mapping given as a file (not 'identity' or 'column:NAME')."""
    if spec is None or spec == "identity" or spec.startswith("column:"):
        return None
    return Path(spec)


# ------------------------------------------------------------------------------------------ attack


def attack_command(
    *,
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.")],
    release: AuditReleaseOpt,
    columns: AuditColumnsOpt = None,
    release_columns: AuditReleaseColumnsOpt = None,
    method: Annotated[
        Method,
        typer.Option(
            "--method",
            help="intruder: the maximum-knowledge intruder on the reverse-mapped release; distance: "
            "nearest-record linkage; global: one-to-one (Hungarian) linkage; intersection: the "
            "rank-swapping transparency attack (needs --swap-p or --window).",
        ),
    ] = Method.intruder,
    metric: Annotated[
        Metric, typer.Option("--metric", help="distance/global: z-score Euclidean or Mahalanobis distance.")
    ] = Metric.euclidean,
    swap_p: Annotated[
        float | None,
        typer.Option("--swap-p", help="intersection: the rank-swapping parameter p (percent).", show_default=False),
    ] = None,
    window: Annotated[
        int | None,
        typer.Option(
            "--window", help="intersection: the swap window in ranks (instead of --swap-p).", show_default=False
        ),
    ] = None,
    random: Annotated[
        str | None,
        typer.Option(
            "--random",
            help="intruder: random records, 'all' (all n^m), a count N (sampled), or 'auto' (all when n^m "
            "is small); default auto.",
            show_default=False,
        ),
    ] = None,
    seed: SeedOpt = 0,
    true_mapping: Annotated[
        str | None,
        typer.Option(
            "--true-mapping",
            help="The known record mapping, to report correct linkages: 'identity' (row i of Y is the "
            "masked record i of X), 'column:NAME' (a release column holding each row's 1-based "
            "original record) or a file with one 1-based release row per original record.",
            show_default=False,
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="intruder: draw both distance distributions to this file (needs the plot extra: "
            "pip install 'coutil\\[plot]').",
            show_default=False,
        ),
    ] = None,
    ordinal: AuditOrdinalOpt = None,
    k: KOpt = None,
    force: ForceOpt = False,
    json_output: AuditJsonOpt = False,
) -> None:
    """Link X to the release: the maximum-knowledge intruder (default) or a classical attack."""
    refuse_overwriting_inputs({"--plot": plot}, {"--original": original, "--release": release,
                                                 "--true-mapping": _mapping_file(true_mapping)}, force=force)
    pair = load_checked_pair(original, release, columns, release_columns, ordinal, k)
    x, y = pair.original, pair.release
    truth = None if true_mapping is None else load_mapping(true_mapping, "--true-mapping", pair, ("identity",))
    if isinstance(truth, str) and x.n != y.n:
        raise InputError(f"--true-mapping identity needs as many rows in {release} ({y.n}) as in {original} ({x.n})")
    intruder_only = {"--random": random, "--plot": plot}
    intersection_only = {"--swap-p": swap_p, "--window": window}
    if method is not Method.intruder:
        misplaced = [name for name, value in intruder_only.items() if value is not None]
        if misplaced:
            raise InputError(f"{', '.join(misplaced)} can only be used with --method intruder")
    if method is not Method.intersection:
        misplaced = [name for name, value in intersection_only.items() if value is not None]
        if misplaced:
            raise InputError(f"{', '.join(misplaced)} can only be used with --method intersection")
    elif (swap_p is None) == (window is None):
        raise InputError("--method intersection needs exactly one of --swap-p (percent) or --window (ranks)")
    if method is Method.intruder:
        random_spec = parse_random_spec(random)
        if x.n != y.n:
            raise InputError(
                f"the intruder reverse-maps the release onto the original: {release} has {y.n} rows, "
                f"{original} has {x.n} records (--method distance or global link files of different sizes)"
            )
        announce_pair(pair, k)
        out = _run_intruder(x, y, random_spec, seed, truth, plot, show_progress(json_output))
    else:
        announce_pair(pair, k)
        out = _run_linkage(x, y, method, metric, swap_p, window, truth)
    out = {"columns": list(x.names), **out}
    if json_output:
        emit_json(out)
    elif method is Method.intruder:
        _print_attack(out)
    else:
        _print_linkage(out)


def _run_intruder(
    x: Dataset,
    y: Dataset,
    random_spec: RandomSpec,
    seed: int,
    true_mapping: KnownMapping,
    plot: Path | None,
    show_bar: bool,
) -> dict[str, Any]:
    from coutil.audit.intruder import maximum_knowledge_attack

    with progress(show_bar) as bar:
        task = bar.add_task("random records", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = maximum_knowledge_attack(
            x.values, y.values, random=random_spec, seed=seed, true_mapping=true_mapping, on_progress=on_progress
        )
    out = result.to_dict()
    if plot is not None:
        from coutil.audit.plots import plot_distance_distributions

        n, m = x.values.shape
        title = (f"Maximum-knowledge intruder: {Path(x.source).name} (X) vs {Path(y.source).name}, n = {n}, "
                 f"m = {m}\npermutation distance of each record's match in Z (the release reverse-mapped onto X)")
        plot_distance_distributions(
            result.original_distribution(), result.random_distribution(), plot, hellinger=result.hellinger,
            title=title,
        )
        out["plot"] = str(plot)
    return out


def _run_linkage(
    x: Dataset,
    y: Dataset,
    method: Method,
    metric: Metric,
    swap_p: float | None,
    window: int | None,
    true_mapping: KnownMapping,
) -> dict[str, Any]:
    from coutil.audit.linkage import (
        distance_linkage,
        global_linkage,
        rank_swap_intersection_attack,
        unswapped_attributes,
    )

    if method is Method.distance:
        return distance_linkage(x.values, y.values, metric=metric.value, true_mapping=true_mapping).to_dict()
    if method is Method.global_:
        return global_linkage(x.values, y.values, metric=metric.value, true_mapping=true_mapping).to_dict()
    p = 0.0 if swap_p is None else swap_p
    result = rank_swap_intersection_attack(x.values, y.values, p, window=window, true_mapping=true_mapping)
    differ = unswapped_attributes(x.values, y.values)
    if differ:
        # Rank swapping only moves values: another release gives empty or wrong candidate sets.
        empty = int((result.candidate_sizes == 0).sum())
        stderr_line(
            f"warning: the sorted values of {', '.join(x.names[j] for j in differ)} differ between "
            f"{x.source} and {y.source}: the release is not a rank swap of the original, so candidate "
            f"sets may be empty or wrong ({empty} of {x.n} are empty)"
        )
    return result.to_dict()


def _print_linkage(out: dict[str, Any]) -> None:
    table = Table(title=f"Record linkage ({out['method']})", title_justify="left")
    with_distance = out["method"] != "intersection"
    for name in ("record", "matches in Y", *(["distance"] if with_distance else [])):
        table.add_column(name, justify="right")
    for link in out["linkages"][:AUDIT_TABLE_ROWS]:
        cells = [str(link["record"]), ", ".join(map(str, link["matches"]))]
        if with_distance:
            cells.append("-" if link["distance"] is None else f"{link['distance']:.4f}")
        table.add_row(*cells)
    if len(out["linkages"]) > AUDIT_TABLE_ROWS:
        more = f"({len(out['linkages']) - AUDIT_TABLE_ROWS} more: use --json)"
        table.add_row("...", more, *([""] if with_distance else []))
    err_console.print(table)
    if not with_distance:
        err_console.print(
            f"swap window {out['window']} ranks; mean candidate set {out['mean_candidate_size']:.2f}; "
            f"unique candidate for {out['unique_fraction']:.2%} of the records"
        )
    _print_score(out)


def _print_score(out: dict[str, Any]) -> None:
    if "correct_linkage_rate" in out:
        err_console.print(
            f"correct-linkage rate {out['correct_linkage_rate']:.4f}; "
            f"unique correct {out['unique_correct']}; multiple matches {out['multiple_matches']}"
        )


#: Up to this many distances the table has a row each; beyond, rows are ranges of distances.
DISTANCE_ROWS = 20


def _distance_rows(original: dict[str, float], random: dict[str, float]) -> list[tuple[str, float, float]]:
    """The distribution table's rows: one per distance, or `DISTANCE_ROWS` ranges when there are more."""
    keys = sorted(int(k) for k in original)
    if len(keys) <= DISTANCE_ROWS:
        return [(str(d), original[str(d)], random[str(d)]) for d in keys]
    edges = np.unique(np.linspace(keys[0], keys[-1] + 1, DISTANCE_ROWS + 1).astype(int))
    rows = []
    for low, high in itertools.pairwise(edges.tolist()):
        inside = [str(d) for d in keys if low <= d < high]
        label = str(low) if high - low == 1 else f"{low}-{high - 1}"
        rows.append((label, sum(original[k] for k in inside), sum(random[k] for k in inside)))
    return rows


def _print_attack(out: dict[str, Any]) -> None:
    table = Table(title="Maximum-knowledge intruder: linkages", title_justify="left")
    for name in ("record", "matches in Z", "distance", "p-value"):
        table.add_column(name, justify="right")
    for link in out["linkages"][:AUDIT_TABLE_ROWS]:
        table.add_row(
            str(link["record"]),
            ", ".join(map(str, link["matches"])),
            str(link["distance"]),
            f"{link['p_value']:.4f}",
        )
    if len(out["linkages"]) > AUDIT_TABLE_ROWS:
        table.add_row("...", f"({len(out['linkages']) - AUDIT_TABLE_ROWS} more: use --json)", "", "")
    err_console.print(table)
    dist = Table(title="Distance distributions", title_justify="left")
    for name in ("distance", "original X", "random T"):
        dist.add_column(name, justify="right")
    for label, freq_x, freq_t in _distance_rows(out["original_distribution"], out["random_distribution"]):
        dist.add_row(label, f"{freq_x:.4f}", f"{freq_t:.4f}")
    err_console.print(dist)
    if len(out["original_distribution"]) > DISTANCE_ROWS:
        err_console.print(f"({len(out['original_distribution'])} distances binned into ranges; every distance "
                          "in --json)")
    rnd = out["random_records"]
    how = "all" if rnd["exhaustive"] else f"sampled (seed {rnd['seed']})"
    err_console.print(f"random records: {rnd['count']} ({how}); Hellinger distance {out['hellinger']:.4f}")
    _print_score(out)
    if "plot" in out:
        err_console.print(f"figure written to {out['plot']}")


# ------------------------------------------------------------------------------------- reverse-map


def reverse_map_command(
    *,
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.")],
    release: AuditReleaseOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="CSV file to write Z to.")],
    columns: AuditColumnsOpt = None,
    release_columns: AuditReleaseColumnsOpt = None,
    seed: SeedOpt = 0,
    ordinal: AuditOrdinalOpt = None,
    k: KOpt = None,
    force: ForceOpt = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
) -> None:
    """Algorithm 1: reverse-map the release onto the original values (Z); other columns are copied."""
    from coutil.audit.permutation import reverse_map

    refuse_overwriting_inputs({"--output": output}, {"--original": original, "--release": release}, force=force)
    pair = load_checked_pair(original, release, columns, release_columns, ordinal, k, same_rows="reverse mapping")
    announce_pair(pair, k)
    x, y = pair.original, pair.release
    z = np.asarray(reverse_map(x.values, y.values, seed=seed), dtype=np.float64)
    table = pair.release_table
    # Z replaces the release's own columns (its names, not the original's), other columns are kept.
    release_names = list(pair.release_names)
    # Ordinal columns are written back as categories (Z holds X's values, whole ranks).
    labels = renamed_ordinal(dict(x.ordinal), x.names, release_names)
    z_data = Dataset(tuple(release_names), z, str(release), labels)
    write_csv(output, table.header, replace_columns(table, z_data))
    if json_output:
        emit_json({"output": str(output), "records": y.n, "columns": release_names, "seed": seed,
                   "original": str(original), "release": str(release)})
    else:
        err_console.print(f"wrote {y.n} reverse-mapped records to {output}")


def register(app: typer.Typer) -> None:
    """Add `attack` and `reverse-map` to the `coutil` app."""
    app.command("attack", cls=OneLineErrorsCommand)(attack_command)
    app.command("reverse-map", cls=OneLineErrorsCommand)(reverse_map_command)
