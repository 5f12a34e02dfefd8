"""The ``ipcbench`` command line: every command has working help; bad input exits 2 with a message."""

from __future__ import annotations

import pytest

from pytest_ipcbench.commands import _commands, main

COMMANDS = sorted(_commands())


def test_every_promised_command_is_there() -> None:
    assert {"run", "report", "selfcheck", "compare", "gate", "clean"} <= set(COMMANDS)


def test_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    assert "usage: ipcbench" in capsys.readouterr().out


def test_report_of_a_missing_file_says_so(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "nope.json" in capsys.readouterr().err
