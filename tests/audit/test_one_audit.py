"""One audit maths: a subject's in-round verdict and ``coutil audit --record-values`` are one function
(`coutil.audit.subject`), so the files of a round reproduce every subject's verdict."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import coutil.audit.subject as shared
from coutil.audit.subject import AuditParams, SubjectAudit, audit_subject, manifest_fields, p_value, release_digest
from coutil.cli import main
from coutil.protocol.config import RoundConfig
from coutil.round.memory import MemoryRound, simulate_round
from coutil.round.simulation import synthetic_dataset
from tests.audit.test_ranks import ref_nearest, ref_star

VERDICT_FIELDS = {"accept", "reason", "included", "k_anonymous", "permutation_distance", "variances", "p_value",
                  "plausible", "centroid_is_own_qi"}

# ------------------------------------------------------------------- the function, by hand

# Two groups of 2 rows: one QI column (the group's centroid), one confidential column.
ROWS = [[1.0, 10.0], [1.0, 11.0], [5.0, 20.0], [5.0, 21.0]]
ROUND = bytes(range(16))
COLUMNS = ("q", "c")
LOOSE = AuditParams(k=2, min_permutation_distance=0, random_records=0, alpha=0.05)


def _audit(params: AuditParams = LOOSE, *, conf: float = 11.0, group: int | None = 0,
           sizes: tuple[int, ...] = (2, 2), rows: list[list[float]] = ROWS) -> SubjectAudit:
    return audit_subject(rows, round_id=ROUND, columns=COLUMNS, group_ids=tuple(range(len(sizes))),
                         group_sizes=sizes, qi=(1.2,), confidential=(conf,), group=group, params=params)


def test_the_verdict_on_a_hand_checked_release() -> None:
    # Ranks: q = 1, 1, 5, 5 (tie blocks [1, 2] and [3, 4]); c = 10, 11, 20, 21. Her x = (1.2, 11): q*
    # is the block [1, 2], c* rank 2; row 2 = (1, 11) overlaps both: d = 0, and the windows at d = 0
    # hold (1, 1) and (11): variances 0. No random records: p = (1 + 0) / (1 + 0) = 1.
    verdict = _audit()
    assert verdict == SubjectAudit(True, "ok", True, True, 0, 1.0, True, (0.0, 0.0))
    assert set(verdict.to_dict()) == VERDICT_FIELDS
    assert _audit(dataclasses.replace(LOOSE, k=3)).reason == "not_k_anonymous"
    assert _audit(conf=20.0).reason == "not_included"  # in the release, not in her group
    assert _audit(group=1).reason == "not_included"
    assert _audit(group=None).reason == "not_included"
    promise = _audit(dataclasses.replace(LOOSE, min_permutation_distance=1))
    assert promise.reason == "distance_below_promise" and not promise.accept and promise.included
    two_qi = [[1.0, 10.0], [2.0, 11.0], [5.0, 20.0], [5.0, 21.0]]
    assert _audit(rows=two_qi).reason == "not_k_anonymous"  # group 0 has two QI vectors
    assert _audit(sizes=(2, 1)).reason == "malformed_release"  # groups do not cover the rows
    assert _audit(sizes=(2, 2), rows=[[1.0], [1.0], [5.0], [5.0]]).reason == "malformed_release"


def test_an_empty_release_is_not_one_she_is_in_not_a_malformed_one() -> None:
    # Every group suppressed (SafePub classes that fell below k after their runs): no rows, no groups. She is
    # not in it; random records cannot be drawn from nothing (p = 1, no evidence).
    empty = _audit(dataclasses.replace(LOOSE, random_records=50), sizes=(), rows=np.zeros((0, 2)).tolist())
    assert empty == SubjectAudit(False, "not_included", False, False, 0, 1.0, True, ())
    assert _audit(sizes=(), rows=[]) == empty
    assert _audit(sizes=(2,), rows=[]).reason == "malformed_release"  # a group of rows that are not there


def test_a_group_whose_centroid_is_her_own_qis_is_noticed_locally() -> None:
    # Her QIs 1.2 are not her group's centroid 1.0: nothing to notice.
    assert not _audit().centroid_is_own_qi
    # Every other member registered exactly her QIs (the centroid is hers, up to the rounding of a mean):
    # she notices, and still accepts (a warning on her device, not a complaint).
    third = 0.1 + 0.2  # 0.30000000000000004: a mean of three of these is not exactly it
    rows = [[(third * 3) / 3, 10.0], [(third * 3) / 3, 11.0], [5.0, 20.0], [5.0, 21.0]]
    mine = audit_subject(rows, round_id=ROUND, columns=COLUMNS, group_ids=(0, 1), group_sizes=(2, 2), qi=(third,),
                         confidential=(11.0,), group=0, params=LOOSE)
    assert mine.centroid_is_own_qi and mine.accept
    # Another group's centroid equal to her QIs does not count.
    assert not _audit(rows=[[1.0, 10.0], [1.0, 11.0], [1.2, 20.0], [1.2, 21.0]]).centroid_is_own_qi


def test_the_p_value_counts_her_record_as_one_more_draw() -> None:
    null = np.array([0, 0, 1, 2, 3], dtype=np.int64)
    assert p_value(null, 0) == 3 / 6
    assert p_value(null, -1) == 1 / 6  # never 0
    assert p_value(null, 3) == 1.0
    assert p_value(np.zeros(0, dtype=np.int64), 5) == 1.0


def test_random_records_are_seeded_from_the_release_digest() -> None:
    n_random = 50
    params = dataclasses.replace(LOOSE, random_records=n_random, alpha=0.5)
    verdict = _audit(params)
    # Independent: the digest's encoding written out, numpy's PCG64 seeded with its first 8 bytes,
    # and the reference distances of tests/audit/test_ranks.
    encoded = b"coutil/release-digest/v1\x00" + struct.pack(">I", 16) + ROUND + struct.pack(">I", 2)
    encoded += struct.pack(">I", 1) + b"q" + struct.pack(">I", 1) + b"c"
    encoded += struct.pack(">I", 2) + struct.pack(">QQ", 2, 2) + struct.pack(">QQ", 4, 2)
    encoded += struct.pack("<8d", *[v for row in ROWS for v in row])
    digest = hashlib.sha256(encoded).digest()
    assert release_digest(ROUND, COLUMNS, (2, 2), ROWS) == digest
    assert digest.hex() == "a6fa10e2813d022f4b1ca02df81d46a7dca11cf1a117c1c72fbf9bc787dcda21"
    release = np.asarray(ROWS)
    picks = np.random.default_rng(int.from_bytes(digest[:8], "big")).integers(0, 4, size=(n_random, 2))
    at_or_below = 0
    for pick in picks:
        lo, hi = ref_star(release, release[pick, [0, 1]])
        at_or_below += ref_nearest(release, lo, hi)[0] <= 0
    assert verdict.p_value == (1 + at_or_below) / (1 + n_random)
    assert verdict.plausible is (verdict.p_value >= 0.5)
    # A CSV does not keep the sign of zero: nor does the digest. Everything else changes it.
    negative_zero = [[-0.0, 10.0], *ROWS[1:]]
    zero = [[0.0, 10.0], *ROWS[1:]]
    assert release_digest(ROUND, COLUMNS, (2, 2), negative_zero) == release_digest(ROUND, COLUMNS, (2, 2), zero)
    assert release_digest(bytes(16), COLUMNS, (2, 2), ROWS) != digest
    assert release_digest(ROUND, ("q", "d"), (2, 2), ROWS) != digest
    assert release_digest(ROUND, COLUMNS, (1, 3), ROWS) != digest


# ------------------------------------------------------------------- a round, then the CLI

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=300, alpha=0.1,
                     min_permutation_distance=1)


@pytest.fixture(scope="module")
def round_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[MemoryRound, Any, Path]:
    data = synthetic_dataset(30, CONFIG, 5)
    out = tmp_path_factory.mktemp("round")
    simulated = simulate_round(data, CONFIG, seed=5, out_dir=out)
    assert simulated.report.completed
    return simulated, data, out


def _cli_verdict(capsys: pytest.CaptureFixture[str], out: Path, record: Any, group: int,
                 manifest: Path | None = None) -> dict[str, Any]:
    values = ",".join(repr(float(v)) for v in record)
    argv = ["audit", "--record-values", values, "--release", str(out / "release.csv"),
            "--manifest", str(manifest or out / "manifest.json"), "--group", str(group), "--json"]
    assert main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def _recorded(simulated: MemoryRound, row: int) -> tuple[SubjectAudit, int]:
    node = simulated.subject(row)
    assert node.audit is not None and node.group is not None
    return node.audit, node.group


def _assert_same(recorded: SubjectAudit, cli: dict[str, Any]) -> None:
    assert set(cli) == VERDICT_FIELDS == {f.name for f in dataclasses.fields(SubjectAudit)}
    for name in VERDICT_FIELDS:
        mine = getattr(recorded, name)
        assert cli[name] == (list(mine) if name == "variances" else mine), name


def test_the_cli_reproduces_every_subjects_verdict_from_the_round_files(
    capsys: pytest.CaptureFixture[str], round_files: tuple[MemoryRound, Any, Path]
) -> None:
    simulated, data, out = round_files
    seen: set[tuple[str, bool]] = set()
    for i in range(data.n):
        recorded, group = _recorded(simulated, i)
        cli = _cli_verdict(capsys, out, data.values[i], group)
        _assert_same(recorded, cli["verdict"])
        assert cli["audit_parameters"] == {"k": 3, "min_permutation_distance": 1, "random_records": 300,
                                           "alpha": 0.1}
        seen.add((recorded.reason, recorded.plausible))
    # Both kinds of verdict were compared: accepted and plausible, complained and not plausible.
    assert ("ok", True) in seen and any(not plausible for _, plausible in seen)


def test_a_perturbed_seed_would_be_caught(
    capsys: pytest.CaptureFixture[str], round_files: tuple[MemoryRound, Any, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulated, data, out = round_files
    monkeypatch.setattr(shared, "seed_of", lambda digest: int.from_bytes(digest[:8], "big") + 1)
    differ = 0
    for i in range(10):
        recorded, group = _recorded(simulated, i)
        cli = _cli_verdict(capsys, out, data.values[i], group)["verdict"]
        if cli["p_value"] != recorded.p_value:
            differ += 1
            with pytest.raises(AssertionError):
                _assert_same(recorded, cli)
    # Another sample of 300 random records can give the same count by chance (or p = 1 when every
    # random record matches at her distance or closer), but not for most subjects.
    assert differ >= 5


def test_group_ids_and_release_digest_in_the_manifest(
    capsys: pytest.CaptureFixture[str], round_files: tuple[MemoryRound, Any, Path], tmp_path: Path
) -> None:
    """What the round writer adds (`manifest_fields`): the CLI then needs no assumption on group
    numbers, and refuses a release.csv that is not the manifest's release."""
    simulated, data, out = round_files
    outcome = simulated.report.outcome
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["group_ids"] == list(outcome.group_ids) and len(doc["group_ids"]) == len(outcome.group_sizes)
    assert doc["release_digest"] == manifest_fields(bytes.fromhex(outcome.round_id), outcome.columns,
                                                    outcome.group_ids, outcome.group_sizes,
                                                    outcome.rows)["release_digest"]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(doc))
    recorded, group = _recorded(simulated, 3)
    values = ",".join(repr(float(v)) for v in data.values[3])
    argv = ["audit", "--record-values", values, "--release", str(out / "release.csv"), "--manifest", str(manifest),
            "--group", str(group), "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no note about assumed group numbers
    _assert_same(recorded, json.loads(captured.out)["verdict"])
    doc["release_digest"] = "00" * 32
    manifest.write_text(json.dumps(doc))
    assert main(argv) == 2
    assert "is not the release of" in capsys.readouterr().err
    assert main([*argv[:-3], "--json"]) == 2  # a manifest without --group
    assert "needs --group" in capsys.readouterr().err
