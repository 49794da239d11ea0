"""CLI tests of the alternative diversity criteria, the (d, v, f) form and the classical attacks:
`coutil audit --diversity/--mapping/--d d1,d2,..` and `coutil attack --method ...`."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.audit.linkage import distance_linkage, global_linkage
from coutil.cli import main
from tests.audit.test_diversity import ref_measure, ref_window
from tests.audit.test_linkage import MASKED, ORIGINAL
from tests.audit.test_paper_tables import TABLE3_DEVIATIONS, TABLE4
from tests.audit.test_ranks import ref_star


@pytest.fixture
def files(running_example: Path, tmp_path: Path) -> dict[str, str]:
    """The running example, and Y with X's column names, reordered, plus an extra id column."""
    with (running_example / "Y.csv").open() as handle:
        rows = list(csv.reader(handle))[1:]
    renamed = tmp_path / "Y_named.csv"
    with renamed.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "X3", "X1", "X2"])
        writer.writerows([i + 1, r[2], r[0], r[1]] for i, r in enumerate(rows))
    return {"X": str(running_example / "X.csv"), "Y": str(running_example / "Y.csv"), "Yx": str(renamed)}


def _read(path: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.loadtxt(path, delimiter=",", skiprows=1)


def _run_json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert main(argv) == code, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "--json prints exactly one line"
    result: dict[str, Any] = json.loads(out)
    return result


def _audit(files: dict[str, str]) -> list[str]:
    return ["audit", "--original", files["X"], "--release", files["Yx"]]


def test_release_columns_are_found_by_name(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    # Y with X's names in another order and an extra column pairs by name: Table 4's distances.
    out = _run_json(capsys, [*_audit(files), "--json"])
    assert [r["permutation_distance"] for r in out["records"]] == [row[1] for row in TABLE4.values()]
    assert out["columns"] == ["X1", "X2", "X3"]


@pytest.mark.parametrize("criterion", ["distinct-l", "entropy-l", "t-closeness"])
def test_alternative_criteria(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], criterion: str
) -> None:
    x, y = _read(files["X"]), _read(files["Y"])
    out = _run_json(capsys, [*_audit(files), "--diversity", criterion, "--json"])
    assert out["diversity_criterion"] == criterion
    at_dataset = []
    for i, rec in enumerate(out["records"]):
        lo, hi = ref_star(y, x[i])
        own = rec["permutation_distance"]
        expected = [ref_measure(ref_window(y, lo[j], hi[j], own, j), list(y[:, j]), criterion) for j in range(3)]
        assert rec["diversity"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
        at_dataset.append([ref_measure(ref_window(y, lo[j], hi[j], 1, j), list(y[:, j]), criterion) for j in range(3)])
    pick = np.max if criterion == "t-closeness" else np.min
    assert out["dataset"]["diversity"] == pytest.approx(pick(np.array(at_dataset), axis=0).tolist())
    # A threshold just on the safe side of the worst window holds; just past it fails on that attribute.
    worst = out["dataset"]["diversity"]
    step = -1e-6 if criterion == "t-closeness" else 1e-6
    safe = ",".join(str(w - step) for w in worst)
    ok = _run_json(capsys, [*_audit(files), "--diversity", criterion, "--d", "1", "--v", safe, "--json"])
    assert ok["check"]["holds"] is True and ok["check"]["criterion"] == criterion
    tight = [worst[0], worst[1] + step, worst[2]]
    argv = [*_audit(files), "--diversity", criterion, "--d", "1", "--v", ",".join(map(str, tight)), "--json"]
    failed = _run_json(capsys, argv, code=3)
    assert failed["check"]["failing_attributes"] == ["X2"]
    assert main(argv[:-1]) == 3
    assert "in X2" in capsys.readouterr().err


def test_mapping_form(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    own = list(TABLE3_DEVIATIONS[2][:3])  # record 3 against its own masked record (Table 3)
    argv = [*_audit(files), "--record", "3", "--mapping", "identity", "--json"]
    out = _run_json(capsys, argv)
    assert out["records"][0]["mapping"] == 3 and out["records"][0]["distance_vector"] == own
    closest = _run_json(capsys, [*_audit(files), "--record", "3", "--mapping", "closest", "--json"])
    assert closest["records"][0]["mapping"] == 10
    assert closest["records"][0]["distance_vector"] == list(TABLE3_DEVIATIONS[9][:3])
    holds = _run_json(capsys, [*argv, "--d", ",".join(map(str, own))])
    assert holds["check"]["holds"] is True and holds["check"]["form"] == "mapping"
    tighter = ",".join(map(str, [own[0], own[1] + 1, own[2]]))
    failed = _run_json(capsys, [*argv, "--d", tighter], code=3)
    assert failed["check"]["failing_attributes"] == ["X2"] and failed["check"]["failing_records"] == [3]
    # A vector d alone is the (d, v, f) form with f = the closest record.
    vector = _run_json(capsys, [*_audit(files), "--record", "3", "--d", "4,1,4", "--json"])
    assert vector["check"]["holds"] is True and vector["records"][0]["mapping"] == 10
    # Subject mode: same, from her record alone.
    subject = ["audit", "--record-values", "100.87,902.21,5108.54", "--release", files["Y"], "--random", "100"]
    mine = _run_json(capsys, [*subject, "--d", "4,1,5", "--json"], code=3)
    assert mine["check"]["failing_attributes"] == ["Y3"]


def test_default_d_is_the_smallest_distance(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    out = _run_json(capsys, [*_audit(files), "--v", "0.009,11,30", "--json"])
    assert out["check"]["d"] == min(row[1] for row in TABLE4.values())
    single = _run_json(capsys, [*_audit(files), "--record", "3", "--v", "24,800,20000", "--json"])
    assert single["check"]["d"] == TABLE4[3][1] and single["check"]["holds"] is True


def _attack(files: dict[str, str], *extra: str) -> list[str]:
    return ["attack", "--original", files["X"], "--release", files["Yx"], *extra]


@pytest.mark.parametrize("method", ["distance", "global"])
@pytest.mark.parametrize("metric", ["euclidean", "mahalanobis"])
def test_attack_linkage_methods(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], method: str, metric: str
) -> None:
    out = _run_json(
        capsys, _attack(files, "--method", method, "--metric", metric, "--true-mapping", "identity", "--json")
    )
    run = distance_linkage if method == "distance" else global_linkage
    api = run(_read(files["X"]), _read(files["Y"]), metric=metric, true_mapping="identity")  # type: ignore[arg-type]
    assert out["method"] == f"{method}-{metric}"
    assert [link["record"] for link in out["linkages"]] == list(range(1, 21))
    assert [link["matches"] for link in out["linkages"]] == [[int(r) + 1 for r in m] for m in api.matches]
    assert [link["distance"] for link in out["linkages"]] == pytest.approx(api.distances.tolist())
    assert api.score is not None and out["correct_linkage_rate"] == api.score.correct_rate
    if method == "global":
        assert sorted(link["matches"][0] for link in out["linkages"]) == list(range(1, 21))
    assert main(_attack(files, "--method", method, "--metric", metric)) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"{method}-{metric}" in captured.err


def test_attack_global_with_fewer_release_rows(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    short = tmp_path / "short.csv"
    short.write_text("\n".join(Path(files["Y"]).read_text().splitlines()[:4]) + "\n")  # 3 rows
    argv = ["attack", "--original", files["X"], "--release", str(short), "--release-columns", "Y1,Y2,Y3"]
    out = _run_json(capsys, [*argv, "--method", "global", "--json"])
    unmatched = [link for link in out["linkages"] if not link["matches"]]
    assert len(unmatched) == 17 and all(link["distance"] is None for link in unmatched)


def test_attack_intersection_on_torra_example(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Torra's slides: rank swapping with p = 20% of 10 records; x_2's candidates intersect to (5, 5, 8, 1).
    paths = {}
    for name, data in (("X", ORIGINAL), ("Y", MASKED)):
        paths[name] = tmp_path / f"{name}.csv"
        np.savetxt(paths[name], data, delimiter=",", header="a,b,c,d", comments="", fmt="%g")
    argv = ["attack", "--original", str(paths["X"]), "--release", str(paths["Y"]), "--method", "intersection"]
    out = _run_json(capsys, [*argv, "--swap-p", "20", "--true-mapping", "identity", "--json"])
    assert out["method"] == "intersection" and out["window"] == 2
    assert out["linkages"][1] == {"record": 2, "matches": [2]}
    assert out["contains_true_fraction"] == 1.0
    sizes = [len(link["matches"]) for link in out["linkages"]]
    assert out["mean_candidate_size"] == pytest.approx(np.mean(sizes))
    assert out["unique_fraction"] == pytest.approx(np.mean(np.array(sizes) == 1))
    same = _run_json(capsys, [*argv, "--window", "2", "--json"])
    assert same["linkages"] == out["linkages"] and "correct_linkage_rate" not in same


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["{A}", "--method", "distance", "--random", "5"], "--random can only be used with --method intruder"),
        (["{A}", "--method", "global", "--plot", "f.png"], "--plot can only be used"),
        (["{A}", "--swap-p", "5"], "--swap-p can only be used with --method intersection"),
        (["{A}", "--method", "intersection"], "exactly one of --swap-p"),
        (["{A}", "--method", "intersection", "--swap-p", "5", "--window", "1"], "exactly one of --swap-p"),
        (["{A}", "--method", "intersection", "--swap-p", "-5"], "bad swap parameter"),
        (["{B}", "--d", "1,2"], "--d has 2 values"),
        (["{B}", "--d", "-1"], "non-negative"),
        (["{B}", "--d", "two"], "bad --d"),
        (["{B}", "--diversity", "t-closeness", "--v", "0.5,2,0.5"], "between 0 and 1"),
        (["{B}", "--mapping", "identity", "--record-values", "1,2,3"], "exactly one of"),
        (["audit", "--record-values", "1,2,3", "--release", "{Y}", "--mapping", "identity"], "needs --original"),
        (["reverse-map", "--original", "{X}", "--release", "{Yx}", "--k", "21", "-o", "z.csv"], "fewer than k = 21"),
        (["audit", "--original", "{X}", "--release", "{Y}", "--columns", "X1,X2"], "no column X1, X2"),
    ],
)
def test_usage_errors(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], argv: list[str], message: str
) -> None:
    expanded: list[str] = []
    for arg in argv:
        if arg == "{A}":
            expanded += _attack(files)
        elif arg == "{B}":
            expanded += _audit(files)
        else:
            expanded.append(arg.format(**files))
    assert main(expanded) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert captured.err.startswith("coutil: error:") and captured.err.count("\n") == 1


def test_global_linkage_cap_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text("a\n" + "\n".join(str(i) for i in range(5001)) + "\n")
    assert main(["attack", "--original", str(big), "--release", str(big), "--method", "global"]) == 2
    assert "exceed the limit" in capsys.readouterr().err


ORDINAL = "edu=primary<secondary<tertiary"


def _write(path: Path, header: str, rows: list[tuple[str, float]]) -> str:
    path.write_text(header + "\n" + "\n".join(f"{a},{b:g}" for a, b in rows) + "\n")
    return str(path)


def test_ordinal_columns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    levels = ["primary", "secondary", "tertiary"]
    rng = np.random.default_rng(5)
    codes_x = rng.integers(0, 3, size=30)
    codes_y = np.clip(codes_x + rng.integers(-1, 2, size=30), 0, 2)
    income_x = rng.normal(50, 10, size=30).round(2)
    income_y = (income_x + rng.normal(0, 5, size=30)).round(2)
    x = _write(tmp_path / "x.csv", "edu,income", [(levels[c], v) for c, v in zip(codes_x, income_x, strict=True)])
    y = _write(tmp_path / "y.csv", "edu,income", [(levels[c], v) for c, v in zip(codes_y, income_y, strict=True)])
    # The same data with the categories written as their ranks 1, 2, 3.
    xn = _write(tmp_path / "xn.csv", "edu,income", [(str(c + 1), v) for c, v in zip(codes_x, income_x, strict=True)])
    yn = _write(tmp_path / "yn.csv", "edu,income", [(str(c + 1), v) for c, v in zip(codes_y, income_y, strict=True)])
    labelled = _run_json(capsys, ["audit", "--original", x, "--release", y, "--ordinal", ORDINAL, "--json"])
    numeric = _run_json(capsys, ["audit", "--original", xn, "--release", yn, "--json"])
    assert labelled["records"] == numeric["records"] and labelled["dataset"] == numeric["dataset"]
    attack = _run_json(capsys, ["attack", "--original", x, "--release", y, "--ordinal", ORDINAL, "--json"])
    assert attack["linkages"] == _run_json(capsys, ["attack", "--original", xn, "--release", yn, "--json"])["linkages"]
    # Reverse mapping writes categories back: Z's edu column is a permutation of X's, in Y's rank order.
    z_path = tmp_path / "z.csv"
    assert main(["reverse-map", "--original", x, "--release", y, "--ordinal", ORDINAL, "-o", str(z_path)]) == 0
    capsys.readouterr()
    with z_path.open() as handle:
        z_edu = [row["edu"] for row in csv.DictReader(handle)]
    assert sorted(z_edu) == sorted(levels[c] for c in codes_x)
    z_codes = np.array([levels.index(e) for e in z_edu])
    # Rank order of Y is kept: a higher category in Y never gets a lower one in Z (ties: any order).
    for lower, higher in ((0, 1), (1, 2), (0, 2)):
        if np.any(codes_y == lower) and np.any(codes_y == higher):
            assert z_codes[codes_y == lower].max() <= z_codes[codes_y == higher].min()
    # Subject mode takes a category or its rank.
    subject = ["audit", "--release", y, "--ordinal", ORDINAL, "--random", "200", "--json"]
    by_label = _run_json(capsys, [*subject, "--record-values", f"secondary,{income_x[0]}"])
    by_rank = _run_json(capsys, [*subject, "--record-values", f"2,{income_x[0]}"])
    assert by_label == by_rank
    assert main([*subject, "--record-values", "college,1"]) == 2
    assert "not a category of edu" in capsys.readouterr().err
    # Without --ordinal a text column is refused with a hint.
    assert main(["attack", "--original", x, "--release", y]) == 2
    assert "--ordinal 'edu=" in capsys.readouterr().err
