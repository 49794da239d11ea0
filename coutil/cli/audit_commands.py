"""`coutil audit`, `coutil attack` and `coutil reverse-map`: permuted privacy, the intruder, linkage.

- ``audit --original X.csv --release Y.csv``: the data protector's (d, v)-permuted privacy audit
  (Table 4): per original record its permutation distance, closest release rows, star ranks and
  window variances, plus the data-set level distance and variances. ``--d/--v`` turn it into a check
  (exit code 3 when it fails, naming the failing attributes); ``--diversity`` picks the criterion of
  condition 2 (variance, distinct-l, entropy-l or t-closeness); ``--mapping`` (or a vector ``--d``)
  selects the (d, v, f) form, per attribute, against a record mapping f.
- ``audit --record-values v1,v2,.. --release Y.csv [--manifest manifest.json --group G]``: the same
  for one subject who knows only her own record, plus her verdict (`coutil.audit.subject`: the very
  function of her audit in a round, so that the files of a round reproduce it): included,
  k-anonymous, distance against the promise, and the plausibility of her distance among random
  records seeded from the release digest.
- ``attack``: the maximum-knowledge intruder (Section 5): linkages to the reverse-mapped release,
  verification with random records, Hellinger distance, p-values, optional figure. ``--method``
  runs a classical attack instead: distance-based linkage, global one-to-one linkage, or the
  rank-swapping intersection attack.
- ``reverse-map``: Algorithm 1, writing Z as CSV (non-selected columns copied from the release).

All three read X and Y through `coutil.audit.inputs` (columns found by name, or by position when
the release has none of X's names, with a note on stderr; ``--release-columns`` to pair differently
named ones, ``--ordinal`` for ordinal categorical columns, ``--k``). A known record mapping f
(``audit --mapping``, ``attack --true-mapping``) is ``identity``, ``column:NAME`` (a release column
holding each row's 1-based original record) or a file with one 1-based release row per original
record. Progress bars show only on a terminal and never with ``--json``.

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

from coutil.audit.inputs import (
    Pair,
    check_k,
    load_mapping,
    load_pair,
    load_release,
    parse_check_options,
    parse_random_spec,
    parse_record_values,
    renamed_ordinal,
)
from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console, progress
from coutil.errors import CheckFailedError, InputError
from coutil.fileio import refuse_overwriting_inputs
from coutil.protocol.config import MAX_RANDOM_RECORDS, RoundConfig
from coutil.sdc.dataset import Dataset, replace_columns, write_csv

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from coutil.audit.inputs import RoundManifest
    from coutil.audit.intruder import RandomSpec
    from coutil.audit.privacy_check import PermutedPrivacyCheck
    from coutil.audit.report import MappingSpec
    from coutil.audit.subject import AuditParams

    KnownMapping = str | NDArray[np.intp] | None

#: Rows shown in the human-readable tables (the JSON always has every row).
TABLE_ROWS = 20
#: A subject's audit thresholds when neither an option nor a manifest gives them: a round's defaults.
_ROUND_DEFAULTS: dict[str, int | float] = {
    name: getattr(RoundConfig, name) for name in ("k", "min_permutation_distance", "random_records", "alpha")
}


class Diversity(StrEnum):
    """Criterion for the diversity of the windows S^j(d) (condition 2 of Definition 1)."""

    variance = "variance"
    distinct_l = "distinct-l"
    entropy_l = "entropy-l"
    t_closeness = "t-closeness"


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


OriginalOpt = Annotated[
    Path | None, typer.Option("--original", help="CSV of the original data set X.", show_default=False)
]
ReleaseOpt = Annotated[Path, typer.Option("--release", help="CSV of the anonymized release Y.")]
ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Comma-separated attributes to use (default: all of X, found by name in Y).",
        show_default=False,
    ),
]
ReleaseColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--release-columns",
        help="The release's names for the --columns attributes, in the same order, when they differ.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write the output even when it is one of the input files "
                                        "(they are read whole first; the output is replaced atomically).")]


def _mapping_file(spec: str | None) -> Path | None:
    """The file of a --true-mapping given as a file (not 'identity' or 'column:NAME')."""
    if spec is None or spec == "identity" or spec.startswith("column:"):
        return None
    return Path(spec)
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for tie-breaking and random records.")]
OrdinalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ordinal",
        help="Declare an ordinal categorical column of X with its categories in increasing order, e.g. "
        "'edu=primary<secondary<tertiary'; it is ranked as 1, 2, 3 in both files. Repeatable.",
        show_default=False,
    ),
]
KOpt = Annotated[
    int | None, typer.Option("--k", help="Reject a release with fewer than k rows.", show_default=False)
]


def _stderr_line(message: str) -> None:
    """One line on stderr, however long (no wrapping, no rich markup in file names)."""
    err_console.print(message, soft_wrap=True, markup=False, highlight=False)


def _show_progress(json_output: bool) -> bool:
    """A progress bar only for a person watching a terminal; never in --json mode."""
    return err_console.is_terminal and not json_output


def _load(
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None,
    ordinal: list[str] | None,
    k: int | None,
    same_rows: str | None = None,
) -> Pair:
    """X and Y for every command, ``--k`` checked; ``same_rows`` (what needs it) refuses files of
    different lengths. Nothing is printed yet: see `_announce`."""
    pair = load_pair(original, release, columns, release_columns, ordinal)
    check_k(pair.release, k)
    if same_rows is not None and pair.release.n != pair.original.n:
        raise InputError(
            f"{same_rows} needs as many release rows as original records: {release} has {pair.release.n} "
            f"rows, {original} has {pair.original.n}"
        )
    return pair


def _announce(pair: Pair, k: int | None) -> None:
    """Once every option is checked (so that an error stays one line): the note on columns paired by
    position, and a warning on a release with fewer rows than the original."""
    if pair.note is not None:
        _stderr_line(pair.note)
    x, y = pair.original, pair.release
    if k is None and y.n < x.n:
        _stderr_line(
            f"warning: {y.source} has {y.n} rows, fewer than the {x.n} records of {x.source}: records "
            "were suppressed or the files do not match (--k sets the least number of rows to accept)"
        )


# ------------------------------------------------------------------------------------------- audit


def _report_check(check: PermutedPrivacyCheck | None, json_output: bool) -> None:
    """Human line on success; exit code 3 with the reasons on failure."""
    if check is None:
        return
    if not check.holds:
        raise CheckFailedError(f"permuted privacy does not hold: {'; '.join(check.problems())}")
    if not json_output:
        summary = check.to_dict()
        err_console.print(
            f"permuted privacy holds ({summary['criterion']}, {summary['form']} form) "
            f"with d = {summary['d']}, v = {summary['v']}"
        )


def _print_audit_table(out: dict[str, Any], dataset: dict[str, Any]) -> None:
    names, records = out["columns"], out["records"]
    # With a non-variance criterion its measure replaces the variances (the JSON has both).
    key = "variances" if out["diversity_criterion"] == "variance" else "diversity"
    label = "var" if key == "variances" else out["diversity_criterion"]
    table = Table(title="(d, v)-permuted privacy audit", title_justify="left")
    table.add_column("record", justify="right")
    table.add_column("distance", justify="right")
    table.add_column("closest")
    for name in names:
        table.add_column(f"{label} {name}", justify="right")
    for rec in records[:TABLE_ROWS]:
        table.add_row(
            str(rec["record"]),
            str(rec["permutation_distance"]),
            ", ".join(map(str, rec["closest"])),
            *(f"{v:.4g}" if key == "diversity" else f"{v:.2f}" for v in rec[key]),
        )
    if len(records) > TABLE_ROWS:
        table.add_row("...", "", f"({len(records) - TABLE_ROWS} more rows: use --json)", *[""] * len(names))
    if dataset:
        table.add_section()
        table.add_row(
            "data set",
            str(dataset["permutation_distance"]),
            "",
            *(f"{v:.4g}" if key == "diversity" else f"{v:.2f}" for v in dataset[key]),
        )
    err_console.print(table)


def audit_command(
    *,
    release: ReleaseOpt,
    original: OriginalOpt = None,
    record_values: Annotated[
        str | None,
        typer.Option(
            "--record-values",
            help="Subject mode: your own record, v1,v2,... in column order.",
            show_default=False,
        ),
    ] = None,
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
    record: Annotated[
        int | None,
        typer.Option("--record", help="Report and check only this record of X (1-based).", show_default=False),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            help="Subject mode: the manifest.json of the round that wrote the release: its round id, "
            "columns, groups and audit parameters (the options below override the parameters).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        int | None,
        typer.Option(
            "--group",
            help="Subject mode, with --manifest: your group number in the round (without --manifest the "
            "whole release is group 0).",
            show_default=False,
        ),
    ] = None,
    random: Annotated[
        int | None,
        typer.Option(
            "--random",
            help=f"Subject mode: random records of the plausibility test [default: the manifest's, else "
            f"{_ROUND_DEFAULTS['random_records']}].",
            show_default=False,
        ),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha",
            help=f"Subject mode: significance level [default: the manifest's, else {_ROUND_DEFAULTS['alpha']}].",
            show_default=False,
        ),
    ] = None,
    min_distance: Annotated[
        int | None,
        typer.Option(
            "--min-distance",
            help="Subject mode: the promised least permutation distance [default: the manifest's, else "
            f"{_ROUND_DEFAULTS['min_permutation_distance']}].",
            show_default=False,
        ),
    ] = None,
    d: Annotated[
        str | None,
        typer.Option(
            "--d",
            help="Check: required permutation distance d, or d1,d2,... per attribute ((d, v, f) form). "
            "Default with --v: the smallest distance of the records checked.",
            show_default=False,
        ),
    ] = None,
    v: Annotated[
        str | None,
        typer.Option(
            "--v",
            help="Check: per attribute, the least variance (or l; for t-closeness the largest t) of the "
            "window S^j(d).",
            show_default=False,
        ),
    ] = None,
    diversity: Annotated[
        Diversity,
        typer.Option("--diversity", help="Diversity criterion of the window for --v (condition 2)."),
    ] = Diversity.variance,
    mapping: Annotated[
        str | None,
        typer.Option(
            "--mapping",
            help="(d, v, f) form with record mapping f: 'closest' (the closest release record), "
            "'identity' (row i of Y for record i of X), 'column:NAME' (a release column holding each "
            "row's 1-based original record) or a file with one 1-based release row per original "
            "record, one per line. Adds each record's mapping and distance_vector.",
            show_default=False,
        ),
    ] = None,
    ordinal: OrdinalOpt = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--k",
            help="Data protector: reject a release with fewer than k rows. Subject mode: the k of the "
            f"verdict's k-anonymity check [default: the manifest's, else {_ROUND_DEFAULTS['k']}].",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """(d, v)-permuted privacy audit of a release: by the data protector or by one subject.

    Exit code 3 when --d/--v are given and the check does not hold. --json keys per record:
    record, permutation_distance, closest (1-based release rows), star_ranks (per attribute, the
    rank of the closest release value y*; with tied values the low end of its rank interval),
    star_rank_intervals (per attribute, \\[low, high]: all the ranks y* occupies), variances, and
    with options diversity, mapping, distance_vector, plausibility; plus dataset and check. Subject
    mode adds verdict (accept, reason, included, k_anonymous, permutation_distance, p_value,
    plausible, variances: the verdict she gives in a round, by the same function),
    audit_parameters, group and release_digest.
    """
    if (original is None) == (record_values is None):
        raise InputError("give exactly one of --original (data protector) or --record-values (subject)")
    if original is not None:
        subject_only = {"--manifest": manifest, "--group": group, "--random": random, "--alpha": alpha,
                        "--min-distance": min_distance}
        misplaced = [name for name, value in subject_only.items() if value is not None]
        if misplaced:
            raise InputError(f"{', '.join(misplaced)} can only be used with --record-values (subject mode)")
        _audit_protector(
            original=original,
            release=release,
            columns=columns,
            release_columns=release_columns,
            record=record,
            d=d,
            v=v,
            diversity=diversity,
            mapping=mapping,
            ordinal=ordinal,
            k=k,
            json_output=json_output,
        )
        return
    assert record_values is not None
    if record is not None:
        raise InputError("--record selects a row of --original; it cannot be used with --record-values")
    _audit_subject(
        record_values=record_values,
        release=release,
        columns=columns,
        manifest=manifest,
        group=group,
        random=random,
        alpha=alpha,
        min_distance=min_distance,
        d=d,
        v=v,
        diversity=diversity,
        mapping=mapping,
        ordinal=ordinal,
        k=k,
        json_output=json_output,
    )


def _audit_protector(
    *,
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None,
    record: int | None,
    d: str | None,
    v: str | None,
    diversity: Diversity,
    mapping: str | None,
    ordinal: list[str] | None,
    k: int | None,
    json_output: bool,
) -> None:
    from coutil.audit.report import protector_report

    pair = _load(original, release, columns, release_columns, ordinal, k)
    x, y = pair.original, pair.release
    known: MappingSpec | None = None
    if mapping is not None:
        spec = load_mapping(mapping, "--mapping", pair, ("closest", "identity"))
        known = ("identity" if spec == "identity" else "closest") if isinstance(spec, str) else spec
    if record is not None and not 1 <= record <= x.n:
        raise InputError(f"--record {record} is out of range: {original} has records 1..{x.n}")
    if isinstance(known, str) and known == "identity" and (x.n if record is None else record) > y.n:
        raise InputError(f"--mapping identity pairs record i with release row i, but {release} has {y.n} rows")
    required, thresholds = parse_check_options(d, v, x.m)
    _announce(pair, k)
    out, check = protector_report(
        x.values,
        y.values,
        x.names,
        record=None if record is None else record - 1,
        d=required,
        v=thresholds,
        criterion=diversity.value,
        mapping=known,
    )
    if json_output:
        emit_json(out)
    else:
        _print_audit_table(out, out["dataset"])
    _report_check(check, json_output)


def _audit_subject(
    *,
    record_values: str,
    release: Path,
    columns: str | None,
    manifest: Path | None,
    group: int | None,
    random: int | None,
    alpha: float | None,
    min_distance: int | None,
    d: str | None,
    v: str | None,
    diversity: Diversity,
    mapping: str | None,
    ordinal: list[str] | None,
    k: int | None,
    json_output: bool,
) -> None:
    """Subject mode: her record, the release (and the round's manifest.json): her verdict by
    `coutil.audit.subject.audit_subject`, the function she runs in the round."""
    from coutil.audit.inputs import load_round_manifest
    from coutil.audit.report import subject_report
    from coutil.audit.subject import audit_subject, release_digest

    round_file = None if manifest is None else load_round_manifest(manifest)
    if round_file is not None and columns is None:
        columns = ",".join(round_file.qi + round_file.confidential)
    y = load_release(release, columns, ordinal)
    values = parse_record_values(record_values, y)
    if mapping is not None and mapping != "closest":
        raise InputError(f"--mapping {mapping} needs --original: a subject does not know her release row")
    required, thresholds = parse_check_options(d, v, y.m)
    params = _subject_params(round_file, k=k, random=random, alpha=alpha, min_distance=min_distance)
    group_sizes: tuple[int, ...]
    group_ids: tuple[int, ...] | None
    if round_file is None:
        # No round: the release is one group (0) of whole records, with no QI column.
        if group not in (None, 0):
            raise InputError("--group needs --manifest: without a round the whole release is group 0")
        round_id, n_qi, group_sizes, group_ids, mine = b"", 0, (y.n,), (0,), 0
    else:
        if group is None:
            raise InputError(f"--manifest {manifest} needs --group: your group number in the round")
        round_id, n_qi, group_sizes, mine = round_file.round_id, len(round_file.qi), round_file.group_sizes, group
        group_ids = round_file.group_ids
        if group_ids is None:
            # Rounds number their groups 0, 1, ... in release order; only a group emptied of every
            # record (all its members excluded) is missing from a release, shifting the later ones.
            group_ids = tuple(range(len(group_sizes)))
            _stderr_line(f"note: {manifest} has no group_ids; taking the groups as 0..{len(group_ids) - 1} "
                         "in release order")
        if sum(group_sizes) != y.n or len(group_ids) != len(group_sizes):
            raise InputError(f"{manifest} describes {sum(group_sizes)} rows in {len(group_sizes)} groups, "
                             f"but {release} has {y.n} rows")
    digest = release_digest(round_id, y.names, group_sizes, y.values)
    if round_file is not None and round_file.release_digest not in (None, digest):
        raise InputError(f"{release} is not the release of {manifest}: its release_digest differs")
    verdict = audit_subject(
        y.values, round_id=round_id, columns=y.names, group_ids=group_ids, group_sizes=group_sizes,
        qi=values[:n_qi], confidential=values[n_qi:], group=mine, params=params,
    )  # fmt: skip
    out, check = subject_report(
        values, y.values, y.names, audit=verdict, params=params, d=required, v=thresholds,
        criterion=diversity.value, mapping=None if mapping is None else "closest",
    )  # fmt: skip
    out["audit_parameters"] = {
        "k": params.k,
        "min_permutation_distance": params.min_permutation_distance,
        "random_records": params.random_records,
        "alpha": params.alpha,
    }
    out["group"] = mine
    out["release_digest"] = digest.hex()
    if json_output:
        emit_json(out)
    else:
        _print_audit_table(out, {})
        plausible = "plausible (chance matches are common)" if verdict.plausible else "NOT plausible"
        err_console.print(
            f"p-value {verdict.p_value:.4f} over {params.random_records} random records "
            f"(alpha {params.alpha}): a match at this distance is {plausible}"
        )
        err_console.print(
            f"verdict: {'accept' if verdict.accept else 'complain'} ({verdict.reason}); included "
            f"{verdict.included}, k-anonymous {verdict.k_anonymous} (k = {params.k})"
        )
        if verdict.centroid_is_own_qi:
            err_console.print(
                "warning: your group's QI centroid is exactly your own QIs: every other member registered your "
                "QIs. Unless such duplicates are common in this survey, your group may be identities made to "
                "isolate you (protocol/SPEC.md section 3, Sybils)"
            )
    _report_check(check, json_output)


def _subject_params(
    round_file: RoundManifest | None, *, k: int | None, random: int | None, alpha: float | None,
    min_distance: int | None,
) -> AuditParams:
    """The audit thresholds: each option, else the manifest's, else the round's default."""
    from coutil.audit.subject import AuditParams

    base = _ROUND_DEFAULTS if round_file is None else {
        "k": round_file.k,
        "min_permutation_distance": round_file.min_permutation_distance,
        "random_records": round_file.random_records,
        "alpha": round_file.alpha,
    }
    params = AuditParams(
        k=int(base["k"]) if k is None else k,
        min_permutation_distance=int(base["min_permutation_distance"]) if min_distance is None else min_distance,
        random_records=int(base["random_records"]) if random is None else random,
        alpha=float(base["alpha"]) if alpha is None else alpha,
    )
    if params.k < 1:
        raise InputError(f"bad --k {params.k}: expected a positive integer")
    if params.min_permutation_distance < 0:
        raise InputError(f"bad --min-distance {params.min_permutation_distance}: expected a non-negative integer")
    if not 0 <= params.random_records <= MAX_RANDOM_RECORDS:
        raise InputError(f"bad --random {params.random_records}: expected 0 to {MAX_RANDOM_RECORDS} random records")
    if not 0 < params.alpha < 1:
        raise InputError(f"bad --alpha {params.alpha}: expected a probability strictly between 0 and 1")
    return params


# ------------------------------------------------------------------------------------------ attack


def attack_command(
    *,
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.")],
    release: ReleaseOpt,
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
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
    ordinal: OrdinalOpt = None,
    k: KOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Link X to the release: the maximum-knowledge intruder (default) or a classical attack."""
    refuse_overwriting_inputs({"--plot": plot}, {"--original": original, "--release": release,
                                                 "--true-mapping": _mapping_file(true_mapping)}, force=force)
    pair = _load(original, release, columns, release_columns, ordinal, k)
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
        _announce(pair, k)
        out = _run_intruder(x, y, random_spec, seed, truth, plot, _show_progress(json_output))
    else:
        _announce(pair, k)
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
    show_progress: bool,
) -> dict[str, Any]:
    from coutil.audit.intruder import maximum_knowledge_attack

    with progress(show_progress) as bar:
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
        _stderr_line(
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
    for link in out["linkages"][:TABLE_ROWS]:
        cells = [str(link["record"]), ", ".join(map(str, link["matches"]))]
        if with_distance:
            cells.append("-" if link["distance"] is None else f"{link['distance']:.4f}")
        table.add_row(*cells)
    if len(out["linkages"]) > TABLE_ROWS:
        more = f"({len(out['linkages']) - TABLE_ROWS} more: use --json)"
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
    for link in out["linkages"][:TABLE_ROWS]:
        table.add_row(
            str(link["record"]),
            ", ".join(map(str, link["matches"])),
            str(link["distance"]),
            f"{link['p_value']:.4f}",
        )
    if len(out["linkages"]) > TABLE_ROWS:
        table.add_row("...", f"({len(out['linkages']) - TABLE_ROWS} more: use --json)", "", "")
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
    release: ReleaseOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="CSV file to write Z to.")],
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
    seed: SeedOpt = 0,
    ordinal: OrdinalOpt = None,
    k: KOpt = None,
    force: ForceOpt = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
) -> None:
    """Algorithm 1: reverse-map the release onto the original values (Z); other columns are copied."""
    from coutil.audit.permutation import reverse_map

    refuse_overwriting_inputs({"--output": output}, {"--original": original, "--release": release}, force=force)
    pair = _load(original, release, columns, release_columns, ordinal, k, same_rows="reverse mapping")
    _announce(pair, k)
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
    """Add this module's commands to the `coutil` app."""
    app.command("audit", cls=OneLineErrorsCommand)(audit_command)
    app.command("attack", cls=OneLineErrorsCommand)(attack_command)
    app.command("reverse-map", cls=OneLineErrorsCommand)(reverse_map_command)
