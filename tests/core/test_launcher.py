"""The one MPI launcher (core/launcher.py): the command line, records picked out of the output,
a job ended at its timeout with its ranks."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core import launcher
from pytest_ipcbench.core.procs import running

MARK = "@@test-launcher "


def test_command_line_and_a_missing_mpiexec(monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = launcher.command(3, "pkg.mod", ["--worker", "x"], mpiexec="/opt/mpiexec")
    assert cmd == ["/opt/mpiexec", "-n", "3", sys.executable, "-m", "pkg.mod", "--worker", "x"]
    monkeypatch.setattr(launcher, "find_mpiexec", lambda: None)
    with pytest.raises(launcher.MPIExecNotFound, match="no mpiexec found"):
        launcher.command(2, "pkg.mod")


def test_emit_then_record_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    launcher.emit(MARK, {"a": 1, "path": Path("/x")})
    line = capsys.readouterr().out.rstrip("\n")
    assert launcher.record(line, MARK) == {"a": 1, "path": "/x"}
    assert launcher.record("a rank's own print", MARK) is None


def _fake_mpiexec(tmp_path: Path, body: str) -> str:
    """A stand-in for mpiexec that runs its program once (``-n N`` ignored): no MPI needed."""
    exe = tmp_path / "mpiexec"
    exe.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_run_gathers_only_the_marked_lines(tmp_path: Path) -> None:
    exe = _fake_mpiexec(tmp_path, f"print('noise'); print({MARK!r} + '[1, 2]'); print('x', file=sys.stderr); "
                                  "sys.exit(3)")
    done = launcher.run(2, "ignored", mark=MARK, timeout=60, mpiexec=exe)
    assert (done.returncode, done.records, done.timed_out) == (3, [[1, 2]], False)
    assert "noise" in done.stdout and done.stderr.strip() == "x"


def test_a_job_past_its_timeout_is_ended_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    exe = _fake_mpiexec(tmp_path, (
        "import subprocess, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(300)"))
    done = launcher.run(2, "ignored", mark=MARK, timeout=2, mpiexec=exe)
    assert done.timed_out
    child = int(pidfile.read_text())
    assert not running(child), "a rank outlived its job's timeout"


def test_a_rank_that_ignores_sigterm_is_killed_even_when_its_launcher_obeys(tmp_path: Path) -> None:
    # the launcher dies on SIGTERM at once; its rank ignores SIGTERM (as a rank busy in C code, or
    # one whose handler hangs): ending the job must not stop at the launcher's exit
    pidfile = tmp_path / "child.pid"
    exe = _fake_mpiexec(tmp_path, (
        "import subprocess, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, sys, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], \"w\").write(\"ready\"); time.sleep(300)', "
        f"{str(tmp_path / 'ready')!r}])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        f"while not __import__('os').path.exists({str(tmp_path / 'ready')!r}): time.sleep(0.01)\n"
        "print('started', flush=True)\n"
        "time.sleep(300)"))
    job = launcher.start(2, "ignored", mpiexec=exe)
    while job.lines.get(timeout=60) != ("out", "started"):
        pass
    child = int(pidfile.read_text())
    assert running(child)
    try:
        job.kill()
        assert not running(child), "a rank that ignored SIGTERM outlived its job"
    finally:
        if running(child):  # leave nothing behind, even when the test fails
            os.kill(child, signal.SIGKILL)
