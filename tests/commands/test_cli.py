"""The ``ipcbench`` command line: every command has working help; bad input exits 2 with a message."""

from __future__ import annotations

import pytest

from pytest_ipcbench.commands import COMMANDS, main


def test_every_promised_command_is_there() -> None:
    assert {"run", "report", "selfcheck", "compare", "gate", "comment", "export", "init-ci", "clean"} <= set(COMMANDS)


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


def test_run_options_are_typed_and_checked_without_argparse() -> None:
    from pytest_ipcbench.runner.job import RunOptions

    assert RunOptions(level="quick", backends=["shm"]).backends == ["shm"]
    with pytest.raises(ValueError, match="unknown backend 'shmm'"):
        RunOptions(backends=["shmm"])
    with pytest.raises(ValueError, match="--ranks must be at least 2"):
        RunOptions(ranks=1)


def test_a_bad_run_option_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--backends", "shmm", "--list"]) == 2
    assert "unknown backend 'shmm'" in capsys.readouterr().err


def test_run_refuses_an_infinite_case_timeout(capsys) -> None:
    import pytest

    from pytest_ipcbench.commands import main

    for bad in ("inf", "1e12", "-1"):
        with pytest.raises(SystemExit) as info:
            main(["run", "--case-timeout", bad, "--list"])
        assert info.value.code == 2
        assert ("--case-timeout: must be a finite number of seconds > 0, at most 604800 (a week), "
                f"got '{bad}'") in capsys.readouterr().err
