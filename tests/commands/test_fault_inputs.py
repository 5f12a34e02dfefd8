"""Bad inputs the fault pass (tools/fault_pass.py) found still ending in a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main as ipcbench
from pytest_ipcbench.core.checks import OptionError, seconds
from pytest_ipcbench.results.results import Result, ResultSet


def good(path: Path) -> Path:
    rs = ResultSet(env={"python": "3"})
    rs.add(Result("broadcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [1e-6 * (1 + i / 100) for i in range(20)]},
                  nbytes=1000))
    return rs.save(path)


def _unblock(fifo: Path, done: threading.Event) -> None:
    """Were the FIFO opened for reading after all: a writer that closes at once (EOF), so a
    regression fails the test instead of hanging it."""
    while not done.wait(0.05):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nobody reads it, as it should be
            continue


def test_a_400_digit_toml_number_is_a_usage_error_naming_the_key() -> None:
    with pytest.raises(OptionError, match="time-budget.*must be a finite number of seconds"):
        seconds()(10**400, "[tool.ipcbench] time-budget")


@pytest.mark.parametrize("kind", ["fifo", "missing", "deep"])
def test_compare_calibration_that_is_not_a_calibration_file_is_exit_2_without_blocking(tmp_path: Path, capsys,
                                                                                        kind: str) -> None:
    base = good(tmp_path / "base.json")
    cal = tmp_path / "cal.json"
    done = threading.Event()
    if kind == "fifo":
        os.mkfifo(cal)  # nobody writes it: reading it blocked forever
        threading.Thread(target=_unblock, args=(cal, done), daemon=True).start()
    elif kind == "deep":
        cal.write_text("[" * 100_000 + "]" * 100_000)  # RecursionError in the loader
    t0 = time.monotonic()
    try:
        assert ipcbench(["compare", "--calibration", str(cal), str(base), str(base)]) == 2
    finally:
        done.set()
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err
    assert str(cal) in err and "Traceback" not in err, err
    said = {"fifo": "is not a regular file (a FIFO)", "missing": "no calibration file at",
            "deep": "JSON nested too deeply"}[kind]
    assert said in err, err


def test_ctrl_c_while_the_commands_are_imported_is_exit_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The fault pass's Ctrl-C one second after `ipcbench run` started, on a loaded machine, landed
    while the commands' modules were imported: a KeyboardInterrupt traceback."""
    import pytest_ipcbench.commands as commands

    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands.importlib, "import_module", interrupted)
    try:
        rc = ipcbench(["run", "--list"])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped ipcbench's main (a traceback)")
    assert rc == 130
    assert "ipcbench: interrupted" in capsys.readouterr().err


SIGTERMED = """
import os, signal, sys
from pathlib import Path
import pytest_ipcbench.commands as commands
from pytest_ipcbench.commands import gate
from pytest_ipcbench.core import names

def run(args):
    scratch = names.private_dir("gate-run")  # as the gate's: removed in its finally
    print(scratch, flush=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    finally:
        names.remove(scratch)

gate.run = run
sys.exit(commands.main(["gate", "--base", "HEAD"]))
"""


def test_sigterm_runs_the_cleanup_and_exits_143() -> None:
    """A gate killed with SIGTERM (a CI job cancelled, `timeout`) left its scratch folder in the
    temp folder: SIGTERM's default death runs no ``finally``. Now it is taken like a Ctrl-C."""
    proc = subprocess.run([sys.executable, "-c", SIGTERMED], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert "ipcbench: terminated" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    scratch = Path(proc.stdout.split()[0])
    assert scratch.name.endswith("gate-run") and not scratch.exists()
