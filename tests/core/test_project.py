"""``[tool.ipcbench]``: a project's declared matrix, read by ``ipcbench run`` (the command line wins)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.core.project import discover, parse_table, read_config

TABLE = """
[project]
name = "someone-else"
version = "0"

[tool.ipcbench]
backends = ["shm"]
modes = ["bytes"]
scenarios = ["pingpong", "broadcast"]
payloads = ["ndarray"]
sizes = ["1KB", 2000000]
ranks = 2
level = "quick"
"""


def project(tmp_path: Path, text: str = TABLE) -> Path:
    (tmp_path / ".git").mkdir()  # the top of a repository: discovery stops here
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def test_table_becomes_run_options(tmp_path: Path) -> None:
    config = read_config(project(tmp_path) / "pyproject.toml")
    assert config is not None
    assert config.options == {"backends": ["shm"], "modes": ["bytes"], "scenarios": ["pingpong", "broadcast"],
                              "kinds": ["ndarray", "buffer"], "sizes": [1000, 2_000_000], "ranks": 2, "level": "quick",
                              "no_extras": True}
    assert parse_table({"extras": True}, tmp_path).options["no_extras"] is False
    # payloads are the broadcast's; the other scenarios keep theirs (bytes; a tiny object)
    assert parse_table({"payloads": ["records"]}, tmp_path).options["kinds"] == ["records", "buffer", "tiny"]
    assert parse_table({"payloads": ["x"], "scenarios": ["broadcast"]}, tmp_path).options["kinds"] == ["x"]


@pytest.mark.parametrize("table, message", [
    ({"backend": ["shm"]}, "unknown key(s) backend"),
    ({"sizes": ["1 parsec"]}, "bad size '1 parsec'"),
    ({"ranks": "two"}, '[tool.ipcbench] ranks = "two" in'),
    ({"payloads": ["a"], "kinds": ["b"]}, "both payloads and kinds"),
    ({"backends": []}, "the list is empty"),
    ({"extras": "maybe"}, "must be true or false"),
    ({"sizes": list(range(1, 100_000))}, "99999 sizes: at most 64 (each multiplies the matrix)"),
    ({"ranks": "１０"}, "which holds characters other than ASCII"),
])
def test_bad_table_names_file_and_key(tmp_path: Path, table: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        parse_table(table, tmp_path / "pyproject.toml")
    assert "pyproject.toml" in str(info.value)


def test_no_table_declares_nothing(tmp_path: Path) -> None:
    project(tmp_path, "[project]\nname = 'x'\n")
    assert discover(tmp_path) is None
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(TABLE)
    found = discover(sub)
    assert found is not None and found.path == tmp_path / "pyproject.toml"


def _list(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_ipcbench", "run", "--list", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_run_lists_the_declared_matrix_and_the_command_line_overrides_it(tmp_path: Path) -> None:
    project(tmp_path)
    declared = _list(tmp_path)
    assert declared.returncode == 0, declared.stderr
    lines = [ln for ln in declared.stdout.splitlines() if ln.startswith(("mpi ", "local "))]
    assert lines and all(" shm/bytes " in ln for ln in lines), declared.stdout
    assert any("pingpong" in ln and "buffer-1KB r2" in ln for ln in lines)
    assert any("broadcast" in ln and "ndarray-2MB r2" in ln for ln in lines)
    assert not any("granularity" in ln or "stream" in ln for ln in lines)
    assert "extra " not in declared.stdout  # extras (mpi-methods, shared-arrays) are off under a table
    override = _list(tmp_path, "--backends", "zmq", "--scenarios", "pingpong")
    lines = [ln for ln in override.stdout.splitlines() if ln.startswith(("mpi ", "local "))]
    assert lines and all(" zmq/bytes " in ln and "pingpong" in ln for ln in lines), override.stdout
    ignored = _list(tmp_path, "--no-config", "--backends", "shm")
    assert "granularity" in ignored.stdout  # the standard matrix


def test_run_reports_a_bad_table_with_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    project(tmp_path, TABLE.replace('backends = ["shm"]', 'backends = ["no-such-backend"]'))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--list"]) == 2
    err = capsys.readouterr().err
    assert "no-such-backend" in err and "pyproject.toml [tool.ipcbench]" in err
    (tmp_path / "other.toml").write_text("[tool.other]\n")
    assert main(["run", "--list", "--config", str(tmp_path / "other.toml")]) == 2
    assert "has no [tool.ipcbench] table" in capsys.readouterr().err


# The holes the option table closed: each value is checked by its option's one function, whatever
# the source, and ``ipcbench run`` exits 2 naming the file, the key and the value.
@pytest.mark.parametrize("line, message", [
    ("case-timeout = inf", "[tool.ipcbench] case-timeout = inf in {path}: must be a finite number of seconds > 0"),
    ("case-timeout = nan", "[tool.ipcbench] case-timeout = nan in {path}: must be a finite number of seconds > 0"),
    ("time-budget = inf", "[tool.ipcbench] time-budget = inf in {path}: must be a finite number of seconds > 0"),
    ("time-budget = 0", "[tool.ipcbench] time-budget = 0 in {path}: must be a finite number of seconds > 0"),
    ("ranks = 100000", "[tool.ipcbench] ranks = 100000 in {path}: must be a whole number from 2 to 256"),
    ("ranks = 1", "[tool.ipcbench] ranks = 1 in {path}: must be a whole number from 2 to 256"),
    ('level = "fast"', '[tool.ipcbench] level = "fast" in {path}: must be one of quick, default, full'),
])
def test_bad_table_values_exit_2_naming_file_key_and_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        line: str, message: str) -> None:
    project(tmp_path, f"[tool.ipcbench]\n{line}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--list"]) == 2
    err = capsys.readouterr().err
    assert message.format(path=tmp_path / "pyproject.toml") in err, err
    assert "Traceback" not in err


def test_a_tool_that_is_not_a_table_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    project(tmp_path, "tool = 1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--list"]) == 2
    assert f"tool = 1 in {tmp_path / 'pyproject.toml'}: must be a table" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--case-timeout", "inf"), ("--case-timeout", "nan"),
                                         ("--time-budget", "inf"), ("--ranks", "100000")])
def test_the_flag_and_the_key_share_one_check(flag: str, value: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_ipcbench.core.options import RUN

    opt = next(o for o in RUN if o.flag == flag)
    with pytest.raises(ValueError) as from_table:
        parse_table({opt.key: float(value) if value != "100000" else 100000}, tmp_path / "pyproject.toml")
    with pytest.raises(SystemExit) as stop:
        main(["run", "--no-config", "--list", flag, value])
    assert stop.value.code == 2
    problem = str(from_table.value).rsplit(": ", 1)[1]
    assert f"argument {flag}: {problem}" in capsys.readouterr().err
