"""Ctrl-C and SIGTERM on `coutil run` and `coutil simulate`: one line, exit 130 / 143, no child left,
no traceback, and ``--out`` untouched (an older run's outputs stay exactly as they were).

Real `coutil` processes, signalled mid-round: SIGINT to the whole process group (what a terminal's
Ctrl-C does: the embedded broker and the workers receive it too) or to the main process alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

OLD_OUTPUTS = {"release.csv": "a,b\n1,2\n", "report.json": '{"old": true}\n'}


def _old_run(out: Path) -> None:
    out.mkdir()
    for name, text in OLD_OUTPUTS.items():
        (out / name).write_text(text)


def _interrupt(args: list[str], sig: signal.Signals, *, to_group: bool, after_children: int,
               delay: float) -> tuple[subprocess.Popen[bytes], str, list[psutil.Process]]:
    # SIGINT as a terminal leaves it: a test run started in the background of a shell (``pytest &``)
    # has SIGINT ignored, which a child inherits (and Python keeps an ignored SIGINT ignored).
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "coutil", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        me = psutil.Process(proc.pid)
        limit = time.monotonic() + 120
        children: list[psutil.Process] = []
        while time.monotonic() < limit:
            children = me.children(recursive=True)
            if len(children) >= after_children:
                break
            assert proc.poll() is None, proc.communicate()[1].decode()
            time.sleep(0.05)
        time.sleep(delay)
        children = me.children(recursive=True)
        assert proc.poll() is None, "the round ended before the signal: " + proc.communicate()[1].decode()[-2000:]
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, err.decode(), children


def _assert_clean(proc: subprocess.Popen[bytes], err: str, children: list[psutil.Process], code: int,
                  out: Path) -> None:
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("coutil: interrupted"), err
    assert "Traceback" not in err and "BrokenPipe" not in err
    limit = time.monotonic() + 10
    alive = children
    while time.monotonic() < limit:
        alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, [c.cmdline() for c in alive]
    # --out is the older run's, untouched; nothing of the new run beside it.
    assert sorted(p.name for p in out.iterdir()) == sorted(OLD_OUTPUTS)
    for name, text in OLD_OUTPUTS.items():
        assert (out / name).read_text() == text
    assert [p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "to_group", "code"), [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-to-the-group", "sigterm"])
def test_run_with_the_embedded_broker_interrupted(tmp_path: Path, sig: signal.Signals, to_group: bool,
                                                  code: int) -> None:
    out = tmp_path / "out"
    _old_run(out)
    # Children: the resource tracker and the broker; the round is under way a few seconds later.
    proc, err, children = _interrupt(["run", "--subjects", "400", *STILL_REGISTERING, "--out", str(out)], sig,
                                     to_group=to_group,
                                     after_children=2, delay=3.0)
    assert len(children) >= 2
    _assert_clean(proc, err, children, code, out)


#: Registration waits for more subjects than exist, for two minutes: the round is surely under way (not
#: finished) when the signal comes, however fast the machine (a 400-subject round takes under 2 s).
STILL_REGISTERING = ("--set", "expected_subjects=1000000", "--set", "register_window=120")


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "to_group", "code"), [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-to-the-group", "sigterm"])
def test_run_with_worker_processes_interrupted(tmp_path: Path, sig: signal.Signals, to_group: bool,
                                               code: int) -> None:
    out = tmp_path / "out"
    _old_run(out)
    # Children: the resource tracker, the broker and two workers.
    proc, err, children = _interrupt(["run", "--subjects", "400", "--workers", "2", *STILL_REGISTERING, "--out",
                                      str(out)], sig,
                                     to_group=to_group, after_children=4, delay=4.0)
    assert len(children) >= 4
    _assert_clean(proc, err, children, code, out)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_simulate_interrupted(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    out = tmp_path / "out"
    _old_run(out)
    proc, err, children = _interrupt(["simulate", "--subjects", "3000", "--out", str(out)], sig, to_group=False,
                                     after_children=0, delay=3.0)
    _assert_clean(proc, err, children, code, out)


def test_a_finished_run_replaces_an_older_out_whole(tmp_path: Path) -> None:
    from coutil.cli import main

    out = tmp_path / "out"
    _old_run(out)
    (out / "trace.jsonl").write_text("old\n")
    assert main(["simulate", "--subjects", "20", "--set", "k=3", "--out", str(out), "--json"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["release.csv", "manifest.json", "audit.json", "trace.jsonl", "report.json", "transcript.json",
         "evidence.json"])
    assert (out / "report.json").read_text() != OLD_OUTPUTS["report.json"]
    assert (out / "trace.jsonl").read_text() != "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_out_holding_other_files_or_an_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coutil.cli import main

    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious\n")
    assert main(["simulate", "--subjects", "20", "--set", "k=3", "--out", str(out)]) == 2
    assert "thesis.tex" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "precious\n"
    data_dir = tmp_path / "run"
    data_dir.mkdir()
    data = data_dir / "release.csv"
    data.write_text("age,height,income,savings\n" + "".join(f"{20 + i},{150 + i},{1000 * i},{10 * i}\n"
                                                           for i in range(12)))
    code = main(["simulate", "--data", str(data), "--set", "k=3", "--set", 'qi=["age","height"]',
                 "--set", 'confidential=["income","savings"]', "--out", str(data_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "--force" in err and err.count("\n") == 1, err
    assert main(["simulate", "--data", str(data), "--set", "k=3", "--set", 'qi=["age","height"]',
                 "--set", 'confidential=["income","savings"]', "--out", str(data_dir), "--force", "--json"]) == 0
