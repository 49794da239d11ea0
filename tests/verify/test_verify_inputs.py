"""`coutil verify` against a hostile or sloppy user's inputs (found by fuzzing the auditor): every one is a
one-line error with its documented exit code, never a traceback (exit 1), and a transcript that withholds
what it must hold is a failed check (exit 3), never a pass.

- a signed announce whose SafePub bins are JSON nested too deep, or hold an integer beyond the largest float:
  RecursionError / OverflowError escaped `parse_scheme` (exit 1); now the grouping check fails (exit 3);
- an aborted round's run directory whose release.csv is a directory: IsADirectoryError (exit 1); now
  release_files fails as for a completed round's (exit 3);
- a transcript with its roster left out, but its assigns, shuffle_starts, release and verdicts kept: every check
  of the roster and the release was skipped, exit 0; now the roster check fails (exit 3);
- a PATH whose name is too long for the file system: OSError (exit 1); now exit 2;
- a malformed hex field: the one-line message named "transcript", not the file; now the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coutil.cli import main
from coutil.errors import InputError
from coutil.protocol import codec
from coutil.protocol.messages import Announce
from coutil.sdc.generalization import parse_scheme
from tests.verify.test_verify import Run, failed, resigned, run_round, verify


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One honest round with registrations (the grouping is recomputed), run once for the module."""
    return run_round(tmp_path_factory.mktemp("honest"), n=22)


def _copy(run: Run, tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The honest run directory copied, its transcript changed by ``change`` (the JSON object) and signed again by
    the collector, as one forging its transcript would (a change of layout that leaves it unreadable stays so)."""
    directory = tmp_path / "run"
    shutil.copytree(run.directory, directory)
    path = directory / "transcript.json"
    doc = json.loads(path.read_text())
    change(doc)
    with contextlib.suppress(InputError):  # not a transcript any more: what the test shows
        doc = resigned(doc, run.collector)
    path.write_text(json.dumps(doc))
    return directory


def _one_line(err: str) -> bool:
    return err.count("\n") == 1 and "internal error" not in err and "Traceback" not in err


#: Nested deeper than Python's JSON decoder takes (RecursionError), within a signed string's 65,536 bytes.
DEEP = "[" * 30_000 + "]" * 30_000


@pytest.mark.parametrize("bins, words", [
    (DEEP, "nested too deep"),
    (json.dumps({"age": [0, 10**400], "height": [0, 1, 2]}), "age needs at least two finite bin edges"),
    ('{"age": [0, ' + "9" * 5000 + '], "height": [0, 1]}', "a number too long to read"),
])
def test_a_signed_announce_with_bins_safepub_cannot_read_fails_the_grouping(
        honest: Run, tmp_path: Path, bins: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    def safepub(doc: dict[str, Any]) -> None:
        announce = codec.decode(bytes.fromhex(doc["announce"])).message
        assert isinstance(announce, Announce)
        manifest = tuple({**dict(announce.params.manifest), "method": "safepub", "safepub_bins": bins}.items())
        params = dataclasses.replace(announce.params, method="safepub", manifest=manifest)
        doc["announce"] = honest.collector._sign(dataclasses.replace(announce, params=params)).hex()

    directory = _copy(honest, tmp_path, safepub)
    code, result, err = verify(directory, capsys)
    problems = failed(result)
    assert code == 3 and "internal error" not in err, err
    assert any("safepub cannot group the roster" in p and words in p for p in problems["grouping"]), problems


@pytest.mark.parametrize("text", [DEEP, '{"a": [0, 1' + "0" * 400 + "]}", '{"a": [0, ' + "9" * 5000 + "]}"])
def test_bins_python_cannot_take_are_an_input_error(text: str) -> None:
    """The same rule for a round config's ``safepub_bins`` given as JSON text (`RoundConfig`)."""
    with pytest.raises(InputError, match="safepub_bins: "):
        parse_scheme(text, ["a"])


def test_an_aborted_rounds_release_csv_that_cannot_be_read_is_a_failed_check(
        honest: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def aborted(doc: dict[str, Any]) -> None:
        doc.update(release=None, phase="aborted", verdicts=[])

    directory = _copy(honest, tmp_path, aborted)
    (directory / "release.csv").unlink()
    (directory / "release.csv").mkdir()
    code, result, err = verify(directory, capsys)
    assert code == 3 and "internal error" not in err, err
    assert "release.csv: cannot read it (Is a directory)" in failed(result)["release_files"]


def test_a_transcript_withholding_its_roster_fails(honest: Run, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    directory = _copy(honest, tmp_path, lambda doc: doc.update(roster=None))
    code, result, _ = verify(directory, capsys)
    assert code == 3, result["summary"]
    assert result["first_problem"].startswith("roster: no roster although the transcript holds a release, assigns")
    # A round that ended before its roster (too few subjects) holds none of them: skipped, not failed.
    aborted = _copy(honest, tmp_path / "early", lambda doc: doc.update(
        roster=None, assignments=[], shuffle_starts=[], release=None, verdicts=[], phase="aborted"))
    for name in ("release.csv", "manifest.json"):
        (aborted / name).unlink()
    code, result, _ = verify(aborted, capsys)
    statuses = {c["check"]: c["status"] for c in result["checks"]}
    assert code == 0 and statuses["roster"] == "skip", result


def test_a_path_too_long_for_the_file_system_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ("x" * 5000)
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and "cannot read it" in err, err


@pytest.mark.parametrize("field, value, words", [
    ("round", "abc", "round is not valid hex"),
    ("announce", 7, "announce is not a hex string"),
    ("verdicts", ["zz"], "verdicts[0] is not valid hex"),
])
def test_a_malformed_hex_field_names_the_file(honest: Run, tmp_path: Path, field: str, value: object, words: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    directory = _copy(honest, tmp_path, lambda doc: doc.update({field: value}))
    assert main(["verify", str(directory)]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and f"{directory / 'transcript.json'}: {words}" in err, err


@pytest.mark.parametrize("step", [0.0, -1.0])  # (a float not finite is refused `bad_field` on the wire)
def test_a_signed_announce_without_a_positive_step_timeout_fails_the_parameters(
        honest: Run, tmp_path: Path, step: float, capsys: pytest.CaptureFixture[str]) -> None:
    """The auditor times a `silent` exclusion by the announced step (`exclusion_evidence`): a step of 0 or below
    gives a live member no time to answer, and passed (found by fuzzing the auditor)."""
    def no_step(doc: dict[str, Any]) -> None:
        announce = codec.decode(bytes.fromhex(doc["announce"])).message
        assert isinstance(announce, Announce)
        params = dataclasses.replace(announce.params, step_timeout=step)
        doc["announce"] = honest.collector._sign(dataclasses.replace(announce, params=params)).hex()

    code, result, err = verify(_copy(honest, tmp_path, no_step), capsys)
    assert code == 3 and "internal error" not in err, err
    assert any("step_timeout" in p for p in failed(result)["parameters"]), failed(result)


@pytest.mark.parametrize("phase, kind", [(["done"], "array"), ({"a": 1}, "object"), (3, "number"), (None, "null"),
                                         (True, "boolean")])
def test_a_phase_that_is_not_a_string_names_the_file_and_field(
        honest: Run, tmp_path: Path, phase: object, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The checks read the (unsigned) phase: it was taken whatever its JSON type, as its Python str(), and every
    check passed."""
    directory = _copy(honest, tmp_path, lambda doc: doc.update(phase=phase))
    assert main(["verify", str(directory)]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and f"{directory / 'transcript.json'}: phase is a JSON {kind}, not a string" in err, err


def test_shuffle_starts_said_included_but_left_out_fail(honest: Run, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`shuffle_starts_included: true` says the transcript holds every shuffle_start the collector published; with
    an empty list (and no exclusion in the summary) every check passed, though each released group ran."""
    directory = _copy(honest, tmp_path, lambda doc: doc.update(shuffle_starts=[], shuffle_starts_included=True))
    code, result, err = verify(directory, capsys)
    assert code == 3 and "internal error" not in err, err
    assert result["first_problem"].startswith("exclusion_evidence: group 0 is released, and the transcript, which "
                                              "says it holds every shuffle_start"), result["first_problem"]
    # Said not included: the round's signed announce commits to them (SPEC §8.5, manifest transcript = 3), so that
    # fails too (a downgrade); a round announced without the commitment, an older coutil's, skips the check.
    directory = _copy(honest, tmp_path / "flag", lambda doc: doc.update(shuffle_starts=[],
                                                                        shuffle_starts_included=False))
    code, result, _ = verify(directory, capsys)
    assert code == 3 and "withheld (a downgrade)" in result["first_problem"], result


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("name, make, words", [
    ("manifest.json", _loop, "Too many levels of symbolic links"),
    ("manifest.json", Path.mkdir, "Is a directory"),
    ("manifest.json", _fifo, "not a regular file (a FIFO)"),
    ("release.csv", _fifo, "not a regular file (a FIFO)"),
    ("release.csv", _loop, "Too many levels of symbolic links"),
])
def test_a_release_file_that_is_no_regular_file_fails_release_files_at_once(
        honest: Run, tmp_path: Path, name: str, make: Callable[[Path], None], words: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A manifest.json that is a symbolic link loop was taken for no manifest (every check passed), a FIFO hung
    verify (waiting for a writer), a directory said "not JSON"."""
    directory = _copy(honest, tmp_path, lambda doc: None)
    (directory / name).unlink()
    make(directory / name)
    code, result, err = verify(directory, capsys)
    assert code == 3 and "internal error" not in err, err
    assert f"{name}: cannot read it ({words})" in failed(result)["release_files"], failed(result)


@pytest.mark.parametrize("name, make, words", [
    ("transcript.json", _loop, "cannot read the transcript (Too many levels of symbolic links)"),
    ("transcript.json", _fifo, "cannot read the transcript (not a regular file (a FIFO))"),
    ("evidence.json", _loop, "cannot read the evidence (Too many levels of symbolic links)"),
    ("evidence.json", _fifo, "cannot read the evidence (not a regular file (a FIFO))"),
])
def test_a_transcript_or_evidence_that_is_no_regular_file_is_exit_2_naming_it(
        honest: Run, tmp_path: Path, name: str, make: Callable[[Path], None], words: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO hung verify; a transcript.json that is a symbolic link loop was "no transcript.json", an evidence.json
    one was taken for no evidence (its checks skipped)."""
    directory = _copy(honest, tmp_path, lambda doc: None)
    (directory / name).unlink()
    make(directory / name)
    assert main(["verify", str(directory)]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and f"{directory / name}: {words}" in err, err


def test_a_collector_key_with_whitespace_around_it_is_the_key(honest: Run, capsys: pytest.CaptureFixture[str]) -> None:
    """Around it (a key read from a file ends with a newline): the key; inside it: refused, saying so (taken
    before, as `bytes.fromhex` skips any whitespace: two halves pasted apart were one key)."""
    key = honest.collector.public_key.hex()
    for given in (f" {key}\n", f"{key}\r\n", f"\t{key} "):
        assert main(["verify", str(honest.directory), "--collector-key", given]) == 0
        capsys.readouterr()
    assert main(["verify", str(honest.directory), "--collector-key", f"{key[:10]} {key[10:]}"]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) and "bad --collector-key" in err and "whitespace inside it" in err, err
