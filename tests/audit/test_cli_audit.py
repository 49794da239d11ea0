"""CLI tests of `coutil audit`, `coutil attack` and `coutil reverse-map` on the running example
(Tables 3-6 of Domingo-Ferrer & Muralidhar) and on user errors."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.audit import plots
from coutil.audit.plots import plot_distance_distributions
from coutil.audit.subject import release_digest
from coutil.cli import main
from coutil.errors import InputError
from tests.audit.test_paper_tables import TABLE1_Y_RANKS
from tests.audit.test_ranks import ref_nearest, ref_star

# Table 4: per record (closest anonymized record printed in the paper, permutation distance,
# X1 and X2 variances at the record's own distance -- the X3 column of the printed table is shifted).
TABLE4 = {
    1: (1, 4, 12.45, 682.15), 2: (2, 4, 31.12, 682.15), 3: (10, 4, 24.70, 896.76),
    4: (6, 4, 32.47, 1332.66), 5: (5, 2, 16.94, 118.46), 6: (6, 3, 22.88, 414.40),
    7: (7, 1, 12.83, 385.03), 8: (17, 4, 18.76, 682.15), 9: (7, 1, 3.14, 385.03),
    10: (13, 4, 21.96, 682.15), 11: (6, 1, 3.14, 147.25), 12: (12, 4, 13.03, 169.01),
    13: (20, 3, 16.70, 359.80), 14: (14, 3, 1.47, 248.09), 15: (10, 4, 21.96, 937.01),
    16: (19, 4, 22.74, 190.00), 17: (13, 1, 0.75, 115.82), 18: (15, 3, 14.82, 359.80),
    19: (1, 2, 12.76, 252.94), 20: (20, 2, 2.94, 160.52),
}  # fmt: skip
TABLE5 = {
    1: [1, 7], 2: [4], 3: [10], 4: [4], 5: [5], 6: [11], 7: [7], 8: [17], 9: [7, 9], 10: [15],
    11: [2, 6], 12: [12], 13: [20], 14: [14], 15: [10], 16: [19], 17: [13], 18: [12], 19: [13, 19],
    20: [20],
}  # fmt: skip
TABLE5_DISTANCE = [4, 3, 3, 4, 2, 2, 2, 5, 3, 3, 4, 5, 3, 3, 3, 5, 2, 5, 4, 3]
TABLE6_RANDOM = [0.0025, 0.0586, 0.1899, 0.3014, 0.2595, 0.1288, 0.0428, 0.0143, 0.0024]
TABLE6_ORIGINAL = [0.0, 0.0, 0.2, 0.4, 0.2, 0.2, 0.0, 0.0, 0.0]


@pytest.fixture
def files(running_example: Path, tmp_path: Path) -> dict[str, str]:
    """The running example, plus a copy of Y whose header uses X's names (X1,X2,X3)."""
    y_text = (running_example / "Y.csv").read_text().splitlines()
    same_names = tmp_path / "Y_named.csv"
    same_names.write_text("\n".join(["X1,X2,X3", *y_text[1:]]) + "\n")
    return {
        "X": str(running_example / "X.csv"),
        "Y": str(running_example / "Y.csv"),
        "Z": str(running_example / "Z.csv"),
        "Yx": str(same_names),
    }


def _run_json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert main(argv) == code
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "--json prints exactly one line"
    result: dict[str, Any] = json.loads(out)
    return result


def test_audit_json_reproduces_table4(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    out = _run_json(capsys, ["audit", "--original", files["X"], "--release", files["Yx"], "--json"])
    assert set(out) >= {"records", "dataset"}
    assert len(out["records"]) == 20
    for rec in out["records"]:
        assert set(rec) >= {"record", "permutation_distance", "closest", "star_ranks", "variances"}
        closest, distance, var1, var2 = TABLE4[rec["record"]]
        assert rec["permutation_distance"] == distance
        assert closest in rec["closest"] and rec["closest"] == sorted(rec["closest"])
        assert round(rec["variances"][0], 2) == var1
        assert round(rec["variances"][1], 2) == var2
    third = out["records"][2]
    # Table 3: y* ranks (8, 2, 16), closest record 10, variances 24.70, 896.76, 20167.78.
    assert third["star_ranks"] == [8, 2, 16]
    assert third["closest"] == [10]
    assert [round(v, 2) for v in third["variances"]] == [24.70, 896.76, 20167.78]
    assert out["dataset"]["permutation_distance"] == 1
    assert [round(v, 2) for v in out["dataset"]["variances"]] == [0.01, 11.07, 30.26]


def test_audit_release_columns_and_single_record(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    argv = ["audit", "--original", files["X"], "--release", files["Y"], "--release-columns", "Y1,Y2,Y3"]
    out = _run_json(capsys, [*argv, "--record", "3", "--json"])
    assert [r["record"] for r in out["records"]] == [3]
    assert out["records"][0]["closest"] == [10]
    assert out["dataset"]["permutation_distance"] == 1
    # Human output: a table on stderr, nothing on stdout.
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "data set" in captured.err


def test_audit_thresholds(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    base = ["audit", "--original", files["X"], "--release", files["Yx"]]
    ok = _run_json(capsys, [*base, "--d", "1", "--v", "0.009,11,30", "--json"])
    assert ok["check"]["holds"] is True
    failed = _run_json(capsys, [*base, "--d", "1", "--v", "0.009,12,30", "--json"], code=3)
    assert failed["check"]["failing_attributes"] == ["X2"]
    assert main([*base, "--d", "2"]) == 3
    err = capsys.readouterr().err
    assert "permutation distance below d = 2" in err
    # Record 3 alone has distance 4 and larger variances.
    assert main([*base, "--record", "3", "--d", "4", "--v", "24,800,20000"]) == 0
    capsys.readouterr()


def test_subject_mode(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    argv = ["audit", "--record-values", "100.87,902.21,5108.54", "--release", files["Y"]]
    out = _run_json(capsys, [*argv, "--random", "8000", "--json"])
    (rec,) = out["records"]
    assert rec["permutation_distance"] == 4
    assert rec["closest"] == [10]
    assert rec["star_ranks"] == [8, 2, 16]
    plaus = rec["plausibility"]
    assert set(plaus) == {"p_value", "alpha", "plausible", "random_records"}
    assert plaus["random_records"] == 8000 and plaus["alpha"] == 0.05
    # Without a manifest the release is one group of whole records of round id b"": the random
    # records are drawn with the first 8 bytes of that release digest. Without ties a record's star
    # ranks are the ranks of its values, so its distance is the L-infinity distance to the nearest
    # row of ranks; p = (1 + #{random records at distance <= 4}) / (1 + 8000).
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    names = tuple(Path(files["Y"]).read_text().splitlines()[0].split(","))
    seed = int.from_bytes(release_digest(b"", names, (20,), y)[:8], "big")
    assert out["release_digest"] == release_digest(b"", names, (20,), y).hex()
    ranks = np.array(TABLE1_Y_RANKS)
    picks = np.random.default_rng(seed).integers(0, 20, size=(8000, 3))
    random_ranks = ranks[picks, np.arange(3)]
    chance = np.abs(random_ranks[:, None, :] - ranks[None, :, :]).max(axis=2).min(axis=1)
    assert plaus["p_value"] == (1 + int(np.sum(chance <= 4))) / 8001
    assert plaus["plausible"] is (plaus["p_value"] >= 0.05)
    # The verdict: her original record is not a row of the (noisy) release.
    verdict = out["verdict"]
    assert set(verdict) == {"accept", "reason", "included", "k_anonymous", "permutation_distance", "p_value",
                            "plausible", "variances", "centroid_is_own_qi"}
    assert verdict["reason"] == "not_included" and verdict["k_anonymous"] is True  # 20 rows >= k = 5
    assert verdict["p_value"] == plaus["p_value"] and verdict["variances"] == rec["variances"]
    assert out["audit_parameters"] == {"k": 5, "min_permutation_distance": 0, "random_records": 8000,
                                       "alpha": 0.05}
    again = _run_json(capsys, [*argv, "--random", "500", "--k", "21", "--json"])
    assert again["records"][0]["plausibility"]["random_records"] == 500
    assert again["verdict"]["k_anonymous"] is False
    assert main([*argv, "--d", "5"]) == 3
    capsys.readouterr()


def _reference_distance(release: np.ndarray[Any, Any], q_lo: list[int], q_hi: list[int]) -> int:
    return ref_nearest(release, q_lo, q_hi)[0]


def test_subject_mode_empty_round_release_with_an_unclosed_quote(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Subject mode on a round that released no rows reads release.csv by the strict CSV reader: an unclosed
    quote is one line naming file and line, exit 2 (a lenient reader swallowed it into a row)."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"manifest": {"qi": ["age"], "confidential": ["income"], "k": 3,
                                                 "min_permutation_distance": 1, "random_records": 10, "alpha": 0.05},
                                    "round_id": "00" * 16, "group_sizes": []}))
    release = tmp_path / "release.csv"
    release.write_text('age,income\n"1,2\n')
    argv = ["audit", "--record-values", "1,2", "--release", str(release), "--manifest", str(manifest)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coutil: error:")
    assert f"{release}, line 2: unclosed quote" in err
    release.write_text("age,income\n")  # the header alone: her verdict, not an error
    assert main(argv) == 0


@pytest.mark.parametrize("noise", [1e-6, 2.0])
def test_subject_plausibility_is_the_sampled_p_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, noise: float
) -> None:
    # A low-noise release: the subject's own masked record keeps her ranks (distance 0), which random
    # records almost never reach: her match is NOT plausible. A high-noise one: plausible.
    rng = np.random.default_rng(11)
    x = rng.normal(size=(60, 3))
    y = x + rng.normal(scale=noise, size=x.shape)
    release = tmp_path / "y.csv"
    np.savetxt(release, y, delimiter=",", header="a,b,c", comments="", fmt="%.12g")
    y = np.loadtxt(release, delimiter=",", skiprows=1)
    own = x[7]
    n_random = 400
    argv = ["audit", "--record-values", ",".join(f"{v:.12g}" for v in own), "--release", str(release)]
    argv += ["--random", str(n_random)]
    out = _run_json(capsys, [*argv, "--json"])
    (rec,) = out["records"]
    star_lo, star_hi = ref_star(y, np.array([float(f"{v:.12g}") for v in own]))
    distance = _reference_distance(y, star_lo, star_hi)
    assert rec["permutation_distance"] == distance
    # Independent computation: the subject's N random records take attribute j from row picks[i, j]
    # (numpy's default_rng(seed).integers, seed = the first 8 bytes of the release digest, big-endian);
    # p = (1 + #{random records at distance <= hers}) / (1 + N).
    seed = int.from_bytes(release_digest(b"", ("a", "b", "c"), (60,), y)[:8], "big")
    picks = np.random.default_rng(seed).integers(0, y.shape[0], size=(n_random, 3))
    closer = 0
    for pick in picks:
        values = y[pick, np.arange(3)]
        lo, hi = ref_star(y, values)
        closer += _reference_distance(y, lo, hi) <= distance
    plaus = rec["plausibility"]
    assert plaus["p_value"] == (1 + closer) / (1 + n_random)
    assert plaus["random_records"] == n_random
    if noise < 1e-3:
        assert distance == 0 and rec["closest"] == [8]
        assert plaus["p_value"] < 0.05 and plaus["plausible"] is False
        assert main(argv) == 0
        assert "NOT plausible" in capsys.readouterr().err
    else:
        assert plaus["p_value"] >= 0.05 and plaus["plausible"] is True


def test_attack_json_reproduces_tables_5_and_6(
    capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    out = _run_json(
        capsys,
        [
            "attack",
            "--original",
            files["X"],
            "--release",
            files["Yx"],
            "--true-mapping",
            "identity",
            "--json",
        ],
    )
    assert set(out) >= {"linkages", "original_distribution", "random_distribution", "hellinger"}
    assert [link["record"] for link in out["linkages"]] == list(range(1, 21))
    assert {link["record"]: link["matches"] for link in out["linkages"]} == TABLE5
    assert [link["distance"] for link in out["linkages"]] == TABLE5_DISTANCE
    random = out["random_distribution"]
    original = out["original_distribution"]
    assert [round(random[str(d)], 4) for d in range(9)] == TABLE6_RANDOM
    assert [round(original[str(d)], 4) for d in range(9)] == TABLE6_ORIGINAL
    # p-value of a linkage at distance d: the random frequency at d or closer.
    fifth = out["linkages"][4]
    assert fifth["p_value"] == pytest.approx(sum(random[str(d)] for d in range(3)))
    # Hellinger distance between the two printed distributions (Table 6 at full precision).
    overlap = sum(np.sqrt(original[d] * random[d]) for d in original)
    assert out["hellinger"] == pytest.approx(np.sqrt(1 - overlap), rel=1e-12)
    assert out["random_records"] == {"count": 8000, "exhaustive": True, "seed": None}
    assert out["correct_linkage_rate"] == pytest.approx(0.375)
    assert out["unique_correct"] == 6
    plain = _run_json(capsys, ["attack", "--original", files["X"], "--release", files["Yx"], "--json"])
    assert "correct_linkage_rate" not in plain


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height in pixels from a PNG's header (its first chunk is IHDR)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_attack_sampled_and_plot(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    drawn: list[dict[str, Any]] = []
    real = plots.plot_distance_distributions

    def spy(original: dict[int, float], random: dict[int, float], path: Path, **kwargs: Any) -> Path:
        drawn.append({"original": dict(original), "random": dict(random), **kwargs})
        return real(original, random, path, **kwargs)

    monkeypatch.setattr(plots, "plot_distance_distributions", spy)
    figure = tmp_path / "fig" / "distances.png"
    argv = ["attack", "--original", files["X"], "--release", files["Yx"], "--random", "3000"]
    out = _run_json(capsys, [*argv, "--seed", "4", "--plot", str(figure), "--json"])
    assert out["random_records"] == {"count": 3000, "exhaustive": False, "seed": 4}
    assert sum(out["random_distribution"].values()) == pytest.approx(1.0)
    assert out["plot"] == str(figure)
    # The figure shows the two distributions of the JSON, and its Hellinger distance.
    (call,) = drawn
    assert {str(d): f for d, f in call["original"].items()} == out["original_distribution"]
    assert {str(d): f for d, f in call["random"].items()} == out["random_distribution"]
    assert call["hellinger"] == out["hellinger"]
    width, height = _png_size(figure)
    assert 400 <= width <= 2400 and 250 <= height <= 1200
    assert figure.stat().st_size > 5_000  # bars, labels and legend, not an empty canvas
    # Another release (X itself: every record links at distance 0) draws another figure.
    other = tmp_path / "other.png"
    argv_x = ["attack", "--original", files["X"], "--release", files["X"], "--random", "3000", "--seed", "4"]
    _run_json(capsys, [*argv_x, "--plot", str(other), "--json"])
    assert drawn[1]["original"][0] == 1.0 and drawn[0]["original"][0] == 0.0
    assert other.read_bytes() != figure.read_bytes()
    # Human output goes to stderr.
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "Hellinger" in captured.err


def test_reverse_map_writes_z(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    target = tmp_path / "Z.csv"
    argv = ["reverse-map", "--original", files["X"], "--release", files["Y"], "--release-columns", "Y1,Y2,Y3"]
    assert main([*argv, "-o", str(target)]) == 0
    capsys.readouterr()
    lines = target.read_text().splitlines()
    assert lines[0] == "Y1,Y2,Y3"
    written = np.loadtxt(target, delimiter=",", skiprows=1)
    assert np.allclose(written, np.loadtxt(files["Z"], delimiter=",", skiprows=1))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--columns", "X1,nope"], "unknown column 'nope'"),
        (["--columns", ""], "bad column list"),
        (["--k", "25"], "fewer than k = 25"),
        (["--record", "21"], "out of range"),
        (["--v", "1,2"], "--v has 2 values"),
        (["--record-values", "1,2,3"], "exactly one of"),
    ],
)
def test_audit_usage_errors(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], extra: list[str], message: str
) -> None:
    assert main(["audit", "--original", files["X"], "--release", files["Yx"], *extra, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert captured.err.startswith("coutil: error:") and captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "--original", "{X}", "--release", "{Y}", "--columns", "X1,X3"], "cannot be paired by position"),
        (
            ["attack", "--original", "{X}", "--release", "{Y}", "--release-columns", "Y1,Y2"],
            "names 2 attributes",
        ),
        (["attack", "--original", "{X}", "--release", "{Yx}", "--random", "many"], "bad --random"),
        (["attack", "--original", "{X}", "--release", "{Yx}", "--true-mapping", "x"], "bad --true-mapping"),
        (
            ["attack", "--original", "{X}", "--release", "{Yx}", "--random", "all", "--k", "50"],
            "fewer than k",
        ),
        (["audit", "--record-values", "1,2", "--release", "{Y}"], "has 2 values"),
        (["audit", "--release", "{Y}"], "exactly one of"),
        (["reverse-map", "--original", "{X}/nope.csv", "--release", "{Y}", "-o", "z.csv"], "no such file"),
    ],
)
def test_other_usage_errors(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], argv: list[str], message: str
) -> None:
    assert main([a.format(**files) for a in argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.count("\n") == 1


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A None entry in sys.modules makes `import matplotlib` raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(InputError, match=r"install coutil\[plot\]"):
        plot_distance_distributions({0: 1.0}, {0: 0.5, 1: 0.5}, tmp_path / "f.png")
