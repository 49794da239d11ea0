"""`coutil audit`: the (d, v)-permuted privacy audit of a release, by the data protector or by one subject.

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

X and Y are read through `coutil.audit.inputs`, as by `coutil attack` and `coutil reverse-map`
(`coutil.cli.attack_commands`; the shared options and loading are in `coutil.cli.common`): columns
found by name, or by position when the release has none of X's names, with a note on stderr;
``--release-columns`` to pair differently named ones, ``--ordinal`` for ordinal categorical columns,
``--k``. A known record mapping f (``--mapping``) is ``identity``, ``column:NAME`` (a release column
holding each row's 1-based original record) or a file with one 1-based release row per original record.

``--json`` prints one JSON object on stdout; the keys are the documented interface. Row numbers in
output are 1-based (as in the paper's tables); the Python API is 0-based.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coutil.audit.inputs import load_mapping, load_release, parse_check_options, parse_record_values
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
    stderr_line,
)
from coutil.errors import CheckFailedError, InputError
from coutil.protocol.config import MAX_RANDOM_RECORDS, RoundConfig

if TYPE_CHECKING:
    from coutil.audit.inputs import RoundManifest
    from coutil.audit.privacy_check import PermutedPrivacyCheck
    from coutil.audit.report import MappingSpec
    from coutil.audit.subject import AuditParams


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


OriginalOpt = Annotated[
    Path | None, typer.Option("--original", help="CSV of the original data set X.", show_default=False)
]


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
    for rec in records[:AUDIT_TABLE_ROWS]:
        table.add_row(
            str(rec["record"]),
            str(rec["permutation_distance"]),
            ", ".join(map(str, rec["closest"])),
            *(f"{v:.4g}" if key == "diversity" else f"{v:.2f}" for v in rec[key]),
        )
    if len(records) > AUDIT_TABLE_ROWS:
        table.add_row("...", "", f"({len(records) - AUDIT_TABLE_ROWS} more rows: use --json)", *[""] * len(names))
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
    release: AuditReleaseOpt,
    original: OriginalOpt = None,
    record_values: Annotated[
        str | None,
        typer.Option(
            "--record-values",
            help="Subject mode: your own record, v1,v2,... in column order.",
            show_default=False,
        ),
    ] = None,
    columns: AuditColumnsOpt = None,
    release_columns: AuditReleaseColumnsOpt = None,
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
    ordinal: AuditOrdinalOpt = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--k",
            help="Data protector: reject a release with fewer than k rows. Subject mode: the k of the "
            f"verdict's k-anonymity check [default: the manifest's, else {_ROUND_DEFAULTS['k']}].",
            show_default=False,
        ),
    ] = None,
    json_output: AuditJsonOpt = False,
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

    pair = load_checked_pair(original, release, columns, release_columns, ordinal, k)
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
    announce_pair(pair, k)
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
    if group is not None and group < 0:
        # Rounds number their groups from 0: a negative one is a typo, never a group she was assigned to.
        raise InputError(f"bad --group {group}: a group number is 0 or more (the one in your assignment)")
    if round_file is not None and columns is None:
        columns = ",".join(round_file.qi + round_file.confidential)
    if round_file is not None and not round_file.group_sizes:
        _audit_empty_release(round_file, manifest, release, record_values, group, json_output, params=_subject_params(
            round_file, k=k, random=random, alpha=alpha, min_distance=min_distance))
        return
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
            stderr_line(f"note: {manifest} has no group_ids; taking the groups as 0..{len(group_ids) - 1} "
                         "in release order")
        if sum(group_sizes) != y.n or len(group_ids) != len(group_sizes):
            raise InputError(f"{manifest} describes {sum(group_sizes)} rows in {len(group_sizes)} groups, "
                             f"but {release} has {y.n} rows")
        if mine not in group_ids:
            # Audited, a group the release does not hold is a "not_included" complaint with exit 0: a typo
            # (--group 99999) would pass for a verdict. The message still says what it means when it was
            # hers: a group whose every member was excluded is left out of the release.
            raise InputError(f"--group {mine} is not a group of {manifest} (its group_ids: "
                             f"{_id_ranges(group_ids)}): if that was your group, it was left out of the release "
                             "(every member excluded) and your record is not in it")
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


def _id_ranges(ids: tuple[int, ...]) -> str:
    """Group ids as short ranges (0-3, 5, 7-39): a round's thousands of ids would not fit one line."""
    runs: list[list[int]] = []
    for value in sorted(set(ids)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def _audit_empty_release(round_file: RoundManifest, manifest: Path | None, release: Path, record_values: str,
                         group: int | None, json_output: bool, *, params: AuditParams) -> None:
    """Subject mode on a round whose every group was suppressed: release.csv is its header alone, and she is not
    in it (`not_included`, SPEC §10), the verdict she gives in the round, by the same function."""
    import numpy as np

    from coutil.audit.inputs import parse_floats
    from coutil.audit.subject import audit_subject, release_digest
    from coutil.sdc.dataset import read_csv_file

    names = round_file.qi + round_file.confidential
    # The strict reader: an unclosed quote or a malformed file is a one-line error naming the file and line.
    rows = [row for _, row in read_csv_file(release) if any(cell.strip() for cell in row)]
    if not rows or tuple(cell.strip() for cell in rows[0]) != names or len(rows) > 1:
        raise InputError(f"{release} is not the release of {manifest}: the round released no rows, "
                         f"so release.csv must be the header {','.join(names)} alone")
    digest = release_digest(round_file.round_id, names, (), np.zeros((0, len(names))))
    if round_file.release_digest not in (None, digest):
        raise InputError(f"{release} is not the release of {manifest}: its release_digest differs")
    values = parse_floats(record_values, "--record-values")
    if len(values) != len(names):
        raise InputError(f"--record-values has {len(values)} values but the round has {len(names)} attributes "
                         f"({', '.join(names)})")
    n_qi = len(round_file.qi)
    verdict = audit_subject(np.zeros((0, len(names))), round_id=round_file.round_id, columns=names, group_ids=(),
                            group_sizes=(), qi=values[:n_qi], confidential=values[n_qi:], group=group,
                            params=params)
    if json_output:
        emit_json({"verdict": verdict.to_dict(), "group": group, "release_digest": digest.hex(), "rows": 0})
    else:
        err_console.print(f"the release of round {round_file.round_id.hex()} has no rows (every group was "
                          f"suppressed): verdict complain ({verdict.reason}); your record was not released")


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


def register(app: typer.Typer) -> None:
    """Add `audit` to the `coutil` app."""
    app.command("audit", cls=OneLineErrorsCommand)(audit_command)
