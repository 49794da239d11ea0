"""Generate coutil's default synthetic survey data set, ``coutil/data/survey.csv``.

Reproduce with ``python simulations/make_default_dataset.py`` (no network; fixed seed, so the file is
byte-for-byte the same every time; ``--check`` only verifies that the shipped file is up to date).

10,000 fictitious respondents (enough for ``coutil run --subjects 10000``). Quasi-identifier-like
attributes: ``age`` (years, 18-85), ``height_cm`` (integer cm), ``weight_kg`` (one decimal),
``hours_worked`` (per week, integer).
Confidential-like attributes: ``income`` (yearly, rounded to 100), ``savings`` (rounded to 100),
``medical_spend`` (yearly, rounded to 10). All positive. The dependencies are the ones a survey
team would expect: height depends on a hidden sex, weight on height and age (through BMI), hours
worked drop after retirement age, income grows with hours and age (a concave career curve),
savings with income and age, medical spending with age and BMI. No record describes a real person.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

import numpy as np

SEED = 20240611
N_RECORDS = 10_000
HEADER = ("age", "height_cm", "weight_kg", "hours_worked", "income", "savings", "medical_spend")
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "coutil" / "data" / "survey.csv"


def generate(n: int = N_RECORDS, seed: int = SEED) -> list[tuple[str, ...]]:
    """The survey rows as text cells (already rounded), in the column order of HEADER."""
    rng = np.random.default_rng(seed)
    age = np.clip(np.rint(rng.normal(46.0, 16.0, n)), 18, 85)
    male = rng.random(n) < 0.5  # hidden: not released, but it shapes height and weight
    height = np.clip(np.rint(rng.normal(np.where(male, 176.0, 163.0), 7.0)), 145, 205)
    bmi = np.clip(rng.normal(23.0 + 0.06 * (age - 18.0) + np.where(male, 0.8, 0.0), 3.5), 16.0, 45.0)
    weight = np.round(bmi * (height / 100.0) ** 2, 1)
    retired = age >= 66
    hours = np.where(
        retired,
        np.clip(rng.normal(6.0, 8.0, n), 0.0, 40.0),
        np.clip(rng.normal(37.0, 9.0, n), 0.0, 70.0),
    )
    hours = np.rint(hours)
    career = 0.045 * (age - 18.0) - 0.0007 * (age - 18.0) ** 2
    log_income = 9.3 + 0.022 * hours + career + rng.normal(0.0, 0.45, n)
    income = np.maximum(np.round(np.exp(log_income), -2), 1000.0)
    log_savings = 0.9 * np.log(income) + 0.035 * (age - 18.0) - 1.2 + rng.normal(0.0, 0.8, n)
    savings = np.maximum(np.round(np.exp(log_savings), -2), 100.0)
    log_medical = 5.2 + 0.028 * age + 0.04 * (bmi - 23.0) + 0.15 * np.log(income / 30000.0)
    medical = np.maximum(np.round(np.exp(log_medical + rng.normal(0.0, 0.7, n)), -1), 10.0)
    columns = (
        [str(int(v)) for v in age],
        [str(int(v)) for v in height],
        [f"{v:.1f}" for v in weight],
        [str(int(v)) for v in hours],
        [str(int(v)) for v in income],
        [str(int(v)) for v in savings],
        [str(int(v)) for v in medical],
    )
    return list(zip(*columns, strict=True))


def render(rows: list[tuple[str, ...]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH, help="where to write the CSV")
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python simulations/make_default_dataset.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {N_RECORDS} records, columns {', '.join(HEADER)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
