"""`coutil dp-params` and `coutil anonymize safepub`: (epsilon, delta)-differential privacy by SafePub.

- ``dp-params --epsilon E --delta D``: the sampling probability beta, the smallest k and the delta achieved
  by (k, beta)-SDGS; ``--beta B --k K`` gives the reverse, the (epsilon, delta) of given beta and k.
- ``anonymize safepub IN.csv --qi a,b --epsilon 1 --delta 1e-6 --hierarchy a=a.toml ... -o OUT.csv``:
  sample, generalize with a scheme chosen by a differentially private search, suppress classes below k;
  writes OUT.csv (released records only, input header) and OUT.manifest.json beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from coutil.cli.common import OneLineErrorsCommand, dumps_json, emit_json, err_console
from coutil.errors import InputError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (the machine interface).")]


def manifest_path(output: Path) -> Path:
    """OUT.csv -> OUT.manifest.json (beside the release)."""
    return output.with_name(output.stem + ".manifest.json")


def dp_params_command(
    epsilon: Annotated[
        float | None,
        typer.Option("--epsilon", help="Target epsilon of sampling + k-anonymization.", show_default=False),
    ] = None,
    delta: Annotated[
        float | None, typer.Option("--delta", help="Target delta (0 < delta < 1).", show_default=False)
    ] = None,
    beta: Annotated[
        float | None,
        typer.Option("--beta", help="Reverse: the sampling probability (with --k).", show_default=False),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("--k", help="Reverse: classes below k are suppressed (with --beta).", show_default=False),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """beta, k and the achieved delta of (k, beta)-SDGS for an (epsilon, delta) target, or the reverse.

    k is the smallest whose achieved delta is below the target; ARX's ParameterCalculation returns k + 1
    (shown as k_arx).
    """
    from coutil.sdc import dp

    forward = epsilon is not None or delta is not None
    reverse = beta is not None or k is not None
    if forward == reverse:
        raise InputError("dp-params: give either --epsilon and --delta, or --beta and --k")
    if forward:
        if epsilon is None or delta is None:
            raise InputError("dp-params: --epsilon and --delta go together")
        if not epsilon > 0:
            raise InputError(f"bad --epsilon {epsilon!r}: expected a finite number > 0")
        if not 0 < delta < 1:
            raise InputError(f"bad --delta {delta!r}: expected a number with 0 < delta < 1")
        params = dp.parameters_for(epsilon, delta)
    else:
        if beta is None or k is None:
            raise InputError("dp-params: --beta and --k go together")
        params = dp.parameters_from_beta_k(beta, k)
    if json_output:
        emit_json(params.as_dict())
        return
    if forward:
        err_console.print(
            f"epsilon {params.epsilon:g}, delta target {delta:g}: beta = {params.beta:.12g}, k = {params.k} "
            f"(ARX: {params.k_arx}), achieved delta = {params.delta:.6g}"
        )
    else:
        err_console.print(
            f"beta {params.beta:g}, k {params.k}: epsilon = {params.epsilon:.12g}, delta = {params.delta:.6g}"
        )


def safepub_command(
    input_csv: Annotated[
        Path, typer.Argument(help="CSV file with a header row.", metavar="INPUT.csv", show_default=False)
    ],
    qi: Annotated[str, typer.Option("--qi", help="Comma-separated quasi-identifier columns.", show_default=False)],
    epsilon: Annotated[float, typer.Option("--epsilon", help="Total epsilon (search budget included).")],
    delta: Annotated[float, typer.Option("--delta", help="Target delta (0 < delta < 1; below 1/n).")],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Where to write the released CSV (input header).", show_default=False),
    ],
    hierarchy: Annotated[
        list[str] | None,
        typer.Option(
            "--hierarchy",
            help="COLUMN=FILE for every QI: a .toml file (intervals, dates or tree) or a CSV tree (one column "
            "per level, as ARX's). Repeatable.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed (tests and experiments only: a seeded release is reproducible by anyone who knows the "
            "seed). Default: seeded from the operating system's secure randomness.",
            show_default=False,
        ),
    ] = None,
    score: Annotated[
        str, typer.Option("--score", help="Score of the search: discernibility, granularity, entropy or intensity.")
    ] = "discernibility",
    search_budget: Annotated[
        float, typer.Option("--search-budget", help="Part of epsilon spent on choosing the generalization.")
    ] = 0.1,
    steps: Annotated[int, typer.Option("--steps", help="Steps of the differentially private greedy search.")] = 300,
    json_output: JsonOpt = False,
) -> None:
    """SafePub: sample, generalize (scheme chosen with differential privacy), suppress classes below k.

    The output holds only the released records; OUT.manifest.json beside it states the mechanism, its
    (epsilon, delta), the budget split, beta, k, the score, the chosen levels and the records sampled out
    and suppressed. MDAV releases are never differentially private; this one is.
    """
    from coutil.sdc.dataset import parse_columns, read_csv_table, write_csv
    from coutil.sdc.hierarchy import load_hierarchy, parse_hierarchy_specs
    from coutil.sdc.safepub import SafePubSettings, safepub

    settings = SafePubSettings(epsilon, delta, score, search_budget, steps)
    settings.check()
    if seed is not None and seed < 0:
        raise InputError(f"bad --seed {seed}: expected a non-negative integer")
    qi_names = parse_columns(qi) or []
    specs = parse_hierarchy_specs(hierarchy or [])
    table = read_csv_table(input_csv)
    for name in qi_names:
        table.column_index(name)  # unknown column: one-line error naming the file
    hierarchies = {name: load_hierarchy(name, path) for name, path in specs.items()}
    release = safepub(table.header, table.rows, qi_names, hierarchies, settings, seed=seed, source=str(input_csv))
    write_csv(output, release.header, release.rows)
    manifest = {"input": str(input_csv), "output": str(output), **release.manifest}
    mpath = manifest_path(output)
    try:
        mpath.write_text(dumps_json(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{mpath}: cannot write ({exc.strerror})") from None
    if json_output:
        emit_json({**manifest, "manifest": str(mpath)})
        return
    rec = release.manifest["records"]
    levels = ", ".join(f"{q}={lv}/{release.manifest['heights'][q]}" for q, lv in release.manifest["levels"].items())
    err_console.print(
        f"wrote {output}: {rec['released']} of {rec['input']} records released ({rec['sampled_out']} sampled out, "
        f"{rec['suppressed']} suppressed); ({epsilon:g}, {release.manifest['privacy']['delta']:.3g})-DP, "
        f"beta = {release.parameters.beta:.4f}, k = {release.parameters.k}, levels {levels}; manifest {mpath}"
    )
    if seed is not None:
        err_console.print(f"note: seeded with --seed {seed}: reproducible, for tests and experiments only")


def register(app: typer.Typer) -> None:
    """Add `dp-params` to the `coutil` app."""
    app.command("dp-params", cls=OneLineErrorsCommand)(dp_params_command)


def register_anonymize(anonymize_app: typer.Typer) -> None:
    """Add `safepub` to the existing `coutil anonymize` group."""
    anonymize_app.command("safepub", cls=OneLineErrorsCommand)(safepub_command)

