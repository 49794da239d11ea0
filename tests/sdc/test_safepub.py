"""coutil.sdc.safepub and the `coutil anonymize safepub` / `coutil dp-params` commands."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from coutil.cli import main
from coutil.errors import ExitCode, InputError
from coutil.sdc import dp
from coutil.sdc.generalization import Classes, split_large_classes
from coutil.sdc.hierarchy import IntervalHierarchy, TreeHierarchy
from coutil.sdc.safepub import SafePubSettings, _Scorer, exponential_mechanism, greedy_search, safepub

SEX = TreeHierarchy("sex", "sex", [["F", "*"], ["M", "*"]])
HEADER = ("id", "sex", "income")
# Rows 0-4 are women, 5-11 men.
TINY = [(f"r{i}", "F" if i < 5 else "M", str(1000 + i)) for i in range(12)]
# epsilon 2.5 = 2.0 (anonymization) + 0.5 (search); delta 0.5 gives beta = 1 - e^-2 and k = 5.
TINY_SETTINGS = SafePubSettings(epsilon=2.5, delta=0.5, search_budget=0.5, steps=1)


def test_tiny_release_by_hand() -> None:
    """Every random choice of seed 1, followed by hand.

    The generator draws the 12 sampling uniforms first, then one per exponential-mechanism draw:
    u = 0.512 0.950 0.144 0.949 0.312 0.423 0.828 0.409 0.550 0.028 0.754 0.538 | 0.330 | 0.788.
    beta = 1 - e^-2 = 0.8647, so rows 1 and 3 (u = 0.950, 0.949) are sampled out: 3 women, 7 men remain.
    Lattice: sex level 1 (top, "*") and 0. Step 1: the only candidate is level 0 (uses u = 0.330).
    Final draw among the visited {top, 0} with epsilon 0.5 / 2 = 0.25 and discernibility scores
    (n = 12, k = 5, divisor n (k^2 / (k - 1) + 1) = 12 x 7.25 = 87):
      top: one class of 10, 2 sampled out:        -(10^2 + 12 x 2) / 87 = -124 / 87
      0:   men 7 kept, women 3 < 5 suppressed:    -(7^2 + 12 x (2 + 3)) / 87 = -109 / 87
    P(top) = 1 / (1 + exp(0.125 x 15 / 87)) = 0.49461 < 0.788, so level 0 is released:
    the 7 men, unchanged; the women are suppressed.
    """
    params = dp.parameters_for(2.0, 0.5)
    assert params.k == 5 and params.beta == pytest.approx(1 - math.exp(-2))
    release = safepub(HEADER, TINY, ["sex"], {"sex": SEX}, TINY_SETTINGS, seed=1)
    assert release.sampled.tolist() == [i not in (1, 3) for i in range(12)]
    assert release.levels == (0,)
    assert release.rows == [(f"r{i}", "M", str(1000 + i)) for i in range(5, 12)]
    m = release.manifest
    assert m["records"] == {"input": 12, "sampled_out": 2, "suppressed": 3, "released": 7}
    assert m["levels"] == {"sex": 0} and m["k"] == 5 and m["budget"]["draws"] == 2
    assert m["budget"]["epsilon_per_draw"] == pytest.approx(0.25)
    assert m["privacy"]["epsilon"] == 2.5 and m["privacy"]["delta"] == params.delta < 0.5
    assert m["randomness"]["seeded"] is True and m["randomness"]["seed"] == 1


@pytest.mark.parametrize(
    ("score", "top", "level0"),
    [
        ("discernibility", -124 / 87, -109 / 87),
        # shares: "*" covers the domain (1), a leaf half of it; 2 sampled out + 3 suppressed at level 0; / (k - 1)
        ("granularity", -(2 + 10 * 1.0) / 4, -(5 + 7 * 0.5) / 4),
        ("intensity", -(10 * 1 + 2) / 4, -(7 * 0 + 5) / 4),
        # n x (suppressed + cells at the root) + sum of counts^2, / (n d (k^2 / (k - 1) + 1))
        ("entropy", -(12 * (2 + 10)) / 12 / 7.25, -(12 * 5 + 7**2) / 12 / 7.25),
    ],
)
def test_scores_by_hand(score: str, top: float, level0: float) -> None:
    sampled = np.array([i not in (1, 3) for i in range(12)])
    scorer = _Scorer([SEX.encode([r[1] for r in TINY])], sampled, 12, 5, score)
    assert scorer.score((1,)) == pytest.approx(top)
    assert scorer.score((0,)) == pytest.approx(level0)


def _survey(n: int, seed: int) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    rng = np.random.default_rng(seed)
    rows = [
        (str(int(rng.integers(0, 100))), str(rng.choice(["F", "M"])), str(int(rng.integers(0, 10**5))))
        for _ in range(n)
    ]
    return ("age", "sex", "income"), rows


AGE = IntervalHierarchy.from_widths("age", "age", 0, 100, [5, 10, 20, 40])


@pytest.mark.parametrize("score", ["discernibility", "granularity", "entropy", "intensity"])
def test_no_released_class_below_k(score: str) -> None:
    header, rows = _survey(3000, 2)
    settings = SafePubSettings(epsilon=1.0, delta=1e-5, score=score, steps=50)
    released_any = False
    for seed in range(4):
        release = safepub(header, rows, ["age", "sex"], {"age": AGE, "sex": SEX}, settings, seed=seed)
        # Classes of the output, by their generalized QI values: none below k.
        counts = Counter((r[0], r[1]) for r in release.rows)
        assert all(c >= release.parameters.k for c in counts.values())
        released_any |= bool(counts)
        m = release.manifest
        assert m["records"]["released"] == len(release.rows)
        assert sum(m["records"][x] for x in ("sampled_out", "suppressed", "released")) == 3000
        # Released records are sampled ones, in input order, with non-QI cells untouched.
        kept = np.nonzero(release.released)[0]
        assert all(release.sampled[kept])
        assert [r[2] for r in release.rows] == [rows[i][2] for i in kept]
    assert released_any


def test_suppression_at_every_scheme() -> None:
    _, rows = _survey(2000, 3)
    sampled = np.random.default_rng(0).random(2000) < 0.6
    columns = [AGE.encode([r[0] for r in rows]), SEX.encode([r[1] for r in rows])]
    scorer = _Scorer(columns, sampled, 2000, 12, "discernibility")
    for a in range(AGE.height + 1):
        for b in range(2):
            kept = scorer.kept_mask((a, b))
            keys = Counter(
                (int(columns[0].codes[a][i]), int(columns[1].codes[b][i])) for i in scorer.rows[kept]
            )
            assert all(c >= 12 for c in keys.values())
            dropped = Counter(
                (int(columns[0].codes[a][i]), int(columns[1].codes[b][i])) for i in scorer.rows[~kept]
            )
            assert all(c < 12 for c in dropped.values())


def test_same_seed_same_output_and_secret_randomness() -> None:
    header, rows = _survey(1500, 4)
    settings = SafePubSettings(epsilon=2.0, delta=1e-4, steps=30)
    h = {"age": AGE, "sex": SEX}
    a = safepub(header, rows, ["age", "sex"], h, settings, seed=11)
    b = safepub(header, rows, ["age", "sex"], h, settings, seed=11)
    c = safepub(header, rows, ["age", "sex"], h, settings, seed=12)
    assert a.rows == b.rows and a.manifest == b.manifest
    assert a.sampled.tolist() != c.sampled.tolist()
    d = safepub(header, rows, ["age", "sex"], h, settings)
    assert d.manifest["randomness"]["seeded"] is False
    assert "secrets" in d.manifest["randomness"]["source"] and "seed" not in d.manifest["randomness"]


def test_exponential_mechanism_frequencies() -> None:
    rng = np.random.default_rng(0)
    scores = [0.0, 1.0, 3.0]
    draws = Counter(exponential_mechanism(scores, 2.0, rng) for _ in range(20000))
    weights = np.exp(np.array(scores))  # exp(2 x s / 2)
    expected = weights / weights.sum()
    for i, p in enumerate(expected):
        assert draws[i] / 20000 == pytest.approx(p, abs=0.015)


def test_walk_goes_down_the_lattice() -> None:
    _, rows = _survey(500, 5)
    scorer = _Scorer([AGE.encode([r[0] for r in rows]), SEX.encode([r[1] for r in rows])],
                     np.ones(500, dtype=bool), 500, 3, "discernibility")
    chosen, visited, draws = greedy_search(scorer, (5, 1), 100, 5.0, np.random.default_rng(1))
    assert visited[0] == (5, 1)
    # Every pivot after the first is a predecessor (one level lower on one attribute) of an earlier pivot.
    for i, p in enumerate(visited[1:], start=1):
        assert any(sum(a - b for a, b in zip(q, p, strict=True)) == 1 and all(a >= b for a, b in zip(q, p, strict=True))
                   for q in visited[:i])
    assert chosen in visited
    assert draws == len(visited)  # the walk's draws plus the final one
    # As in ARX, a former pivot that is a predecessor of the current one becomes a candidate again, so the
    # walk may revisit nodes; it stops when no candidate is left or after `steps` steps.
    assert len(set(visited)) <= 12 < len(visited) <= 101


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (SafePubSettings(0.0, 1e-6), "epsilon"),
        (SafePubSettings(1.0, 1.0), "delta"),
        (SafePubSettings(1.0, 0.0), "delta"),
        (SafePubSettings(1.0, 1e-6, score="utility"), "score"),
        (SafePubSettings(1.0, 1e-6, search_budget=1.0), "search budget"),
        (SafePubSettings(1.0, 1e-6, steps=0), "steps"),
    ],
)
def test_bad_settings(settings: SafePubSettings, message: str) -> None:
    with pytest.raises(InputError, match=message):
        safepub(HEADER, TINY, ["sex"], {"sex": SEX}, settings, seed=1)


def test_bad_qi() -> None:
    s = TINY_SETTINGS
    with pytest.raises(InputError, match="unknown column 'age'"):
        safepub(HEADER, TINY, ["age"], {"age": AGE}, s, seed=1)
    with pytest.raises(InputError, match="no hierarchy"):
        safepub(HEADER, TINY, ["sex", "income"], {"sex": SEX}, s, seed=1)
    with pytest.raises(InputError, match="not a quasi-identifier"):
        safepub(HEADER, TINY, ["sex"], {"sex": SEX, "income": AGE}, s, seed=1)
    with pytest.raises(InputError, match="does not cover"):
        safepub(HEADER, [*TINY, ("x", "X", "1")], ["sex"], {"sex": SEX}, s, seed=1)


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    header, rows = _survey(800, 6)
    data = tmp_path / "survey.csv"
    with data.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    age = tmp_path / "age.toml"
    age.write_text('kind = "intervals"\nmin = 0\nmax = 100\nwidths = [10, 20, 40]\n')
    sex = tmp_path / "sex.csv"
    sex.write_text("F;*\nM;*\n")
    return {"data": data, "age": age, "sex": sex, "out": tmp_path / "out" / "release.csv"}


def _args(f: dict[str, Path], *extra: str) -> list[str]:
    return ["anonymize", "safepub", str(f["data"]), "--qi", "age,sex", "--epsilon", "1", "--delta", "1e-4",
            "--hierarchy", f"age={f['age']}", "--hierarchy", f"sex={f['sex']}", "-o", str(f["out"]), *extra]


def test_cli_safepub_json(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(files, "--seed", "5", "--json", "--steps", "20", "--score", "entropy")) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert out.count("\n") == 1
    manifest = json.loads((files["out"].parent / "release.manifest.json").read_text())
    assert report["manifest"].endswith("release.manifest.json")
    assert manifest["score"] == "entropy" and manifest["budget"]["steps"] == 20
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["privacy"]["delta"] < 1e-4
    with files["out"].open() as handle:
        released = list(csv.reader(handle))
    assert released[0] == ["age", "sex", "income"]
    assert len(released) - 1 == manifest["records"]["released"]
    counts = Counter((r[0], r[1]) for r in released[1:])
    assert min(counts.values()) >= manifest["k"]


def test_cli_safepub_human(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(files, "--steps", "10")) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "records released" in captured.err and "DP" in captured.err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--epsilon", "0"), "epsilon"),
        (("--epsilon", "-1"), "epsilon"),
        (("--delta", "1"), "delta"),
        (("--delta", "0"), "delta"),
        (("--delta", "1.5"), "delta"),
        (("--qi", "age,height"), "unknown column 'height'"),
        (("--score", "fancy"), "score"),
        (("--search-budget", "1"), "search budget"),
        (("--steps", "0"), "steps"),
        (("--seed", "-1"), "seed"),
    ],
)
def test_cli_bad_parameters(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], change: tuple[str, str], message: str
) -> None:
    args = _args(files)
    if change[0] in args:
        args[args.index(change[0]) + 1] = change[1]
    else:
        args += list(change)
    assert main(args) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coutil: error:") and message in err


def test_cli_uncovered_value(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["age"].write_text('kind = "intervals"\nmin = 0\nmax = 50\nwidths = [10]\n')
    assert main(_args(files)) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not cover the value" in err and "outside the domain [0, 50]" in err


def test_cli_missing_hierarchy(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(files)
    i = args.index(f"sex={files['sex']}")
    del args[i - 1 : i + 1]
    assert main(args) == ExitCode.USAGE
    assert "no hierarchy for the quasi-identifier 'sex'" in capsys.readouterr().err


def test_cli_hierarchy_csv_with_an_unclosed_quote(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A hierarchy CSV is read by the strict CSV reader: an unclosed quote is one line naming file and line."""
    files["sex"].write_text('F;*\nM;"*\n')
    assert main(_args(files)) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coutil: error:")
    assert f"hierarchy file {files['sex']} for column 'sex', line 2: unclosed quote" in err


def test_cli_dp_params(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dp-params", "--epsilon", "1", "--delta", "1e-6", "--json"]) == 0
    out = capsys.readouterr().out
    got = json.loads(out)
    assert out.count("\n") == 1
    assert got["k"] == 74 and got["k_arx"] == 75 and got["delta"] < 1e-6
    assert got["beta"] == pytest.approx(1 - math.exp(-1), rel=1e-12)
    assert main(["dp-params", "--beta", str(got["beta"]), "--k", "74", "--json"]) == 0
    back = json.loads(capsys.readouterr().out)
    assert back["epsilon"] == pytest.approx(1.0) and back["delta"] == got["delta"]
    assert main(["dp-params", "--epsilon", "1", "--delta", "1e-6"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "k = 74" in captured.err


@pytest.mark.parametrize(
    "args",
    [
        ["--epsilon", "0", "--delta", "1e-6"],
        ["--epsilon", "-2", "--delta", "1e-6"],
        ["--epsilon", "nan", "--delta", "1e-6"],
        ["--epsilon", "inf", "--delta", "1e-6"],
        ["--epsilon", "1", "--delta", "1"],
        ["--epsilon", "1", "--delta", "0"],
        ["--epsilon", "1", "--delta", "-1e-6"],
        ["--epsilon", "1"],
        ["--beta", "1", "--k", "5"],
        ["--beta", "0.5", "--k", "0"],
        ["--beta", "0.5"],
        ["--epsilon", "1", "--delta", "1e-6", "--beta", "0.5", "--k", "3"],
        [],
        ["--epsilon", "abc", "--delta", "1e-6"],
    ],
)
def test_cli_dp_params_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dp-params", *args]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coutil: error:")


@pytest.mark.parametrize("k", [2, 3, 5])
def test_large_classes_are_cut_into_groups_of_k_to_2k_minus_1_in_record_order(k: int) -> None:
    """`split_large_classes` (SPEC §9.1): a class above 2k - 1 becomes groups of k to 2k - 1 (never below k,
    whatever its size), contiguous in record order, each with its class's midpoints; smaller classes stay whole."""
    rng = np.random.default_rng(k)
    for _ in range(300):
        n_classes = int(rng.integers(1, 6))
        labels = rng.integers(0, n_classes, int(rng.integers(0, 120))).astype(np.int64)
        midpoints = np.arange(2.0 * n_classes).reshape(n_classes, 2)
        cut = split_large_classes(Classes(labels, midpoints), k)
        seen = []
        for group in range(cut.n_classes):
            rows = np.flatnonzero(cut.labels == group)
            if not rows.size:
                continue
            (label,) = set(labels[rows].tolist())
            whole = np.flatnonzero(labels == label)
            assert (cut.midpoints[group] == midpoints[label]).all()
            if whole.size > 2 * k - 1:
                assert k <= rows.size <= 2 * k - 1
                assert (np.diff(np.searchsorted(whole, rows)) == 1).all()  # contiguous in record order
            else:
                assert (rows == whole).all()
            seen.append(label)
        assert seen == sorted(seen)  # numbered in class order
        assert sorted(set(seen)) == sorted(set(labels.tolist()))
