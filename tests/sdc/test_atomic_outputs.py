"""Outputs are written whole or not at all (`coutil.fileio`), and an output that is an input is refused.

The decisive test kills a real `coutil anonymize` with SIGKILL while it writes a large output: the
target is then absent or the old complete file, and the only leftover is a hidden ``.NAME.*.tmp``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from coutil.cli import main
from coutil.errors import InputError
from coutil.fileio import atomic_write, staged_directory
from coutil.sdc.dataset import write_csv

OLD = "a,b\n1,2\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text(OLD)
    with pytest.raises(KeyboardInterrupt), atomic_write(target) as handle:
        handle.write("half")
        raise KeyboardInterrupt
    assert target.read_text() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]

    def rows() -> object:
        yield ("1", "2")
        raise RuntimeError("crash while producing rows")

    with pytest.raises(RuntimeError):
        write_csv(target, ["a", "b"], rows())  # type: ignore[arg-type]
    assert target.read_text() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_written_file_has_the_usual_permissions(tmp_path: Path) -> None:
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    write_csv(tmp_path / "x.csv", ["a"], [("1",)])
    assert (tmp_path / "x.csv").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_directory_leaves_the_old_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    with pytest.raises(KeyboardInterrupt), staged_directory(out) as staging:
        (staging / "report.json").write_text('{"new": 1}')
        raise KeyboardInterrupt
    assert (out / "report.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    with pytest.raises(InputError), staged_directory(out, replaceable=["release.csv"]):
        pass


def _big_input(path: Path, rows: int) -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(50, 10, size=(rows, 4))
    np.savetxt(path, values, delimiter=",", header="a,b,c,d", comments="", fmt="%.6f")


@pytest.mark.slow
def test_sigkill_while_writing_leaves_the_old_output(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    _big_input(source, 400_000)
    target = tmp_path / "out.csv"
    target.write_text(OLD)
    for _attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "coutil", "anonymize", "noise", str(source), "-o", str(target),
                                 "--seed", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        caught = False
        while proc.poll() is None:
            temporaries = [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv.")]
            if temporaries and temporaries[0].exists() and temporaries[0].stat().st_size > 0:
                proc.send_signal(signal.SIGKILL)
                caught = True
                break
            time.sleep(0.002)
        proc.wait(60)
        if caught:
            break
    else:
        pytest.fail("the output was never caught being written")
    assert proc.returncode == -signal.SIGKILL
    # The target is the old complete file; the partial one is a hidden temporary, never the output.
    assert target.read_text() == OLD
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("in.csv", "out.csv"))
    assert len(leftovers) == 1 and leftovers[0].startswith(".out.csv.") and leftovers[0].endswith(".tmp")
    # A new, uninterrupted run replaces the old file whole.
    assert main(["anonymize", "noise", str(source), "-o", str(target), "--seed", "1", "--json"]) == 0
    with target.open() as handle:
        assert sum(1 for _ in handle) == 400_001


def test_an_output_that_is_an_input_is_refused_unless_force(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.csv"
    data.write_text("a,b\n" + "".join(f"{i},{2 * i}\n" for i in range(20)))
    before = data.read_text()
    for argv in (["anonymize", "mdav", str(data), "--k", "3", "-o", str(data)],
                 ["anonymize", "noise", str(data), "-o", str(tmp_path / "." / "data.csv")],
                 ["reverse-map", "--original", str(data), "--release", str(data), "-o", str(data)],
                 ["attack", "--original", str(data), "--release", str(data), "--plot", str(data)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--force" in err and str(data) in err, err
        assert data.read_text() == before
    assert main(["anonymize", "mdav", str(data), "--k", "3", "-o", str(data), "--force", "--json"]) == 0
    assert data.read_text() != before
