"""`coutil verify` on a transcript holding a JSON integer Python refuses to convert (more than 4,300 digits):
a malformed file like any other, one line and exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from coutil.cli import main
from coutil.errors import InputError
from coutil.round.transcript import read_transcript

HUGE = "9" * 4301  # one digit past sys.get_int_max_str_digits()'s default


@pytest.mark.parametrize("where", ['{"transcript_version": HUGE}', '{"transcript_version": 2, "x": [HUGE]}'])
def test_a_huge_integer_in_a_transcript_is_a_malformed_file(tmp_path: Path, where: str) -> None:
    path = tmp_path / "transcript.json"
    path.write_text(where.replace("HUGE", HUGE))
    with pytest.raises(InputError, match="not a transcript"):
        read_transcript(path)


@pytest.mark.parametrize("as_directory", [False, True])
def test_verify_exits_2_in_one_line(tmp_path: Path, as_directory: bool, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "transcript.json"
    path.write_text(f'{{"transcript_version": {HUGE}}}')
    assert main(["verify", str(tmp_path if as_directory else path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: not a transcript" in err and "internal error" not in err


@pytest.mark.parametrize("name", ["manifest.json", "evidence.json"])
def test_a_huge_integer_in_a_manifest_or_evidence_file_is_exit_2(tmp_path: Path, name: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The same in the run directory's other JSON files (and the subject's `coutil audit --manifest`)."""
    from coutil.audit.inputs import load_round_manifest
    from coutil.round.evidence import read_evidence

    path = tmp_path / name
    path.write_text(f'{{"x": {HUGE}}}')
    with pytest.raises(InputError):
        (load_round_manifest if name == "manifest.json" else read_evidence)(path)
