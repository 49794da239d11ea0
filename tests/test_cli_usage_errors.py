"""Every `coutil` command and group reports a usage error in one line with exit code 2 (no typer box).

The commands are found by walking the typer app, so a command added without `OneLineErrorsCommand`
(or a group without `OneLineErrorsGroup`) fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from coutil.cli import app, main
from coutil.cli.common import OneLineErrorsCommand, OneLineErrorsGroup


def _is_group(command: Any) -> bool:
    # Recent typer vendors click (typer._click): test the shape, not the class.
    return isinstance(getattr(command, "commands", None), dict)


def _walk(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    if _is_group(command):
        for name, sub in command.commands.items():
            found.extend(_walk(sub, (*path, name)))
    return found


ALL = _walk(get_command(app))
COMMANDS = [(path, cmd) for path, cmd in ALL if not _is_group(cmd)]
GROUPS = [(path, cmd) for path, cmd in ALL if _is_group(cmd)]


def _ids(items: list[tuple[tuple[str, ...], Any]]) -> list[str]:
    return [" ".join(path) or "coutil" for path, _ in items]


def test_the_walk_finds_every_family() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    for expected in ("run", "simulate", "audit", "attack", "reverse-map", "check", "info-loss", "anonymize mdav",
                     "collector serve", "collector export", "subject join", "subject swarm", "version"):
        assert expected in names


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def _assert_one_line(code: int, err: str, argv: list[str]) -> None:
    assert code == 2, (argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("coutil: error: "), (argv, err)
    assert "╭" not in err and "Usage:" not in err


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=_ids(COMMANDS))
def test_every_command_uses_the_one_line_class(path: tuple[str, ...], command: Any) -> None:
    assert isinstance(command, OneLineErrorsCommand), f"coutil {' '.join(path)}: pass cls=OneLineErrorsCommand"


@pytest.mark.parametrize(("path", "group"), GROUPS, ids=_ids(GROUPS))
def test_every_group_uses_the_one_line_class(path: tuple[str, ...], group: Any) -> None:
    assert isinstance(group, OneLineErrorsGroup), f"coutil {' '.join(path)}: pass cls=OneLineErrorsGroup"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=_ids(COMMANDS))
def test_an_unknown_option_is_one_line_exit_2(path: tuple[str, ...], command: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*path, "--no-such-option"]
    _assert_one_line(*_run(argv, capsys), argv)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=_ids(COMMANDS))
def test_a_non_numeric_number_is_one_line_exit_2(path: tuple[str, ...], command: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    numeric = [p for p in command.params if p.opts and p.opts[0].startswith("-")
               and getattr(p.type_descriptor, "annotation", None) in (int, float, int | None, float | None)]
    if not numeric:
        pytest.skip("no numeric option")
    argv = [*path, numeric[0].opts[0], "abc"]
    _assert_one_line(*_run(argv, capsys), argv)


@pytest.mark.parametrize(("path", "group"), [g for g in GROUPS if g[0]], ids=_ids([g for g in GROUPS if g[0]]))
def test_an_unknown_sub_command_is_one_line_exit_2(path: tuple[str, ...], group: Any,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*path, "no-such-command"]
    _assert_one_line(*_run(argv, capsys), argv)


def test_an_unknown_command_and_bad_choices_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["no-such-command"], ["run", "--subjects", "abc"], ["simulate", "--subjects", "abc"],
                 ["audit", "--method", "bogus"], ["run", "--k", "abc"]):
        _assert_one_line(*_run(argv, capsys), argv)


@pytest.mark.parametrize("what", ["directory", "binary", "not_toml", "unreadable"])
@pytest.mark.parametrize("command", [["simulate"], ["run"], ["collector", "serve", "--broker", "mqtt://127.0.0.1:1",
                                                              "--db", "x.sqlite"]])
def test_a_bad_config_path_is_exit_2_naming_the_file(tmp_path: Path, what: str, command: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import os

    path = tmp_path / f"{what}.toml"
    if what == "directory":
        path.mkdir()
    elif what == "binary":
        path.write_bytes(b"\x00\xff\xfe" + os.urandom(200))
    elif what == "not_toml":
        path.write_text("this is = = not toml\n")
    else:
        path.write_text("[round]\nk = 3\n")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who reads everything")
    code, err = _run([*command, "--config", str(path)], capsys)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and str(path) in err, err
