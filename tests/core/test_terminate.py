"""``core.terminate.AsInterrupt``: SIGTERM and SIGHUP taken like a Ctrl-C, bounded by a backstop."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_ipcbench.core.terminate import AsInterrupt, Terminated

# a process that takes the signals, makes a file, signals itself and says what ran on its way out
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from pytest_ipcbench.core.terminate import AsInterrupt, Terminated

    sig, stuck, mark = getattr(signal, sys.argv[1]), sys.argv[2] == "stuck", Path(sys.argv[3])
    term = AsInterrupt(grace=1.0)
    print(",".join(signal.Signals(s).name for s in term.installed), flush=True)
    mark.write_text("made")
    try:
        os.kill(os.getpid(), sig)
        signal.pause()
    except Terminated as exc:
        print("raised", exc.signum == sig, flush=True)
    finally:
        if stuck:  # where the exception cannot reach: a repeat is not raised, the backstop ends it
            os.kill(os.getpid(), sig)
            time.sleep(60)
        mark.unlink()
    sys.exit(3)
""")


def _child(tmp_path: Path, sig: str, stuck: bool = False,
           ignore_hup: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    mark = tmp_path / "made"
    # ignored as nohup does, else at its default whatever this run inherited (a suite run under nohup)
    hup = signal.SIG_IGN if ignore_hup else signal.SIG_DFL
    preexec = lambda: signal.signal(signal.SIGHUP, hup)  # noqa: E731
    proc = subprocess.run([sys.executable, "-c", CHILD, sig, "stuck" if stuck else "-", str(mark)],
                          capture_output=True, text=True, timeout=60, preexec_fn=preexec)
    return proc, mark


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_the_signal_raises_terminated_and_the_cleanup_runs(tmp_path: Path, sig: str) -> None:
    proc, mark = _child(tmp_path, sig)
    assert proc.stdout.splitlines() == ["SIGTERM,SIGHUP", "raised True"], proc.stdout + proc.stderr
    assert proc.returncode == 3 and not mark.exists(), proc.stderr


def test_stuck_after_the_signal_the_backstop_leaves_with_128_plus_the_signal(tmp_path: Path) -> None:
    proc, mark = _child(tmp_path, "SIGTERM", stuck=True)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout + proc.stderr
    assert "still running 1 s after SIGTERM" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert mark.exists()  # the cleanup never finished: the backstop is the last resort, it says so


def test_an_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    """``nohup``: SIGHUP ignored by the parent is not taken (the process goes on after it)."""
    proc, mark = _child(tmp_path, "SIGTERM", ignore_hup=True)
    assert proc.stdout.splitlines()[0] == "SIGTERM", proc.stdout + proc.stderr


def test_another_handler_is_kept_and_restore_gives_back_the_default() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}  # a plain run's own
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, lambda *_: None)  # someone else's
    try:
        term = AsInterrupt()
        assert term.installed == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) == term._handler
        term.restore()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_terminated_is_an_interrupt_not_an_error() -> None:
    """``except Exception`` in a test or a backend must not swallow it."""
    assert issubclass(Terminated, KeyboardInterrupt) and not issubclass(Terminated, Exception)
