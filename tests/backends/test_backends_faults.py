"""Backends on hostile ground: a filesystem too small for the payload, a Ctrl-C inside a library.

A private mount namespace (``unshare -m``, root only) puts a small tmpfs where TMPDIR points, so
the machine's real disk never fills. Skipped, saying why, where that is not possible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.core.local import LocalWorld

SMALL_FS = textwrap.dedent("""
    import os, sys
    import numpy as np
    from pytest_ipcbench.backends.base import BackendSpec
    from pytest_ipcbench.core.group import GroupError
    from pytest_ipcbench.core.local import LocalWorld

    def write_big(group, mode, nbytes):
        with BackendSpec("lmdb", mode).open(group) as live:
            live.write(np.ones(nbytes // 8))
        return "written"

    mode, nbytes = sys.argv[1], int(sys.argv[2])
    with LocalWorld(1) as world:
        try:
            print("RESULT", world.run(write_big, mode, nbytes)[0], flush=True)
        except GroupError as exc:
            print("ERROR", exc, flush=True)
    print("LEFT", sorted(os.listdir(os.environ["TMPDIR"])), flush=True)
""")


def small_filesystem(tmp_path: Path, size: str, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with TMPDIR on a fresh tmpfs of ``size`` in a private mount namespace."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a private mount namespace (unshare -m) with a small tmpfs")
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) (util-linux) for a private mount namespace")
    small = tmp_path / "small"
    small.mkdir()
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; shift 2; TMPDIR="$0" exec "$@"'
    proc = subprocess.run([unshare, "-m", "sh", "-c", script, str(small), size, str(small), *command],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {proc.stderr.strip()}")
    return proc


@pytest.mark.parametrize("mode", ["bytes", "native"])
def test_lmdb_on_a_too_small_filesystem_raises_a_clear_error_instead_of_sigbus(tmp_path: Path, mode: str) -> None:
    proc = small_filesystem(tmp_path, "64m", sys.executable, "-c", SMALL_FS, mode, str(100 * 10**6))
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"  # SIGBUS: rc 135
    error = next((line for line in proc.stdout.splitlines() if line.startswith("ERROR")), "")
    assert "lmdb: cannot reserve" in error and "No space left" in error, proc.stdout
    assert str(tmp_path / "small") in error, error  # names the folder
    assert "for a value of 100 MB" in error and "free of 67.1 MB" in error, error  # and the sizes
    assert "LEFT []" in proc.stdout  # the folder is gone


def test_lmdb_on_a_small_filesystem_still_writes_what_fits(tmp_path: Path) -> None:
    proc = small_filesystem(tmp_path, "64m", sys.executable, "-c", SMALL_FS, "native", str(10 * 10**6))
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "RESULT written" in proc.stdout and "LEFT []" in proc.stdout, proc.stdout


def _modes(group, name: str) -> dict[str, str]:
    """The modes of everything the backend made, seen by its writer while it is open."""
    with BackendSpec(name, "bytes").open(group) as live:
        folder = Path(live.path)
        return {p.name: oct(p.stat().st_mode & 0o777) for p in [folder, *folder.iterdir()]}


@pytest.mark.parametrize("name", ["lmdb", "zmq"])
def test_backend_files_are_readable_by_their_owner_only(name: str) -> None:
    with LocalWorld(1) as world:
        modes = world.run(_modes, name)[0]
    assert modes and all(mode in ("0o700", "0o600") for mode in modes.values()), modes


ZMQ_INTERRUPTED_SETUP = textwrap.dedent("""
    import zmq
    from pytest_ipcbench import BackendSpec
    from pytest_ipcbench.core import names
    from pytest_ipcbench.core.local import LocalWorld

    def open_interrupted(group):
        real = zmq.Context._add_socket
        def interrupted(self, sock):  # Ctrl-C inside Context.socket(): the socket exists, untracked
            raise KeyboardInterrupt
        zmq.Context._add_socket = interrupted
        try:
            with BackendSpec("zmq", "bytes").open(group):
                return "opened"
        except KeyboardInterrupt:
            return "interrupted"
        finally:
            zmq.Context._add_socket = real

    with LocalWorld(1) as world:
        print("RESULT", world.run(open_interrupted)[0], flush=True)
    print("LEFT", [str(item.path) for item in names.find_ours(__import__("os").getpid())], flush=True)
""")


def test_zmq_setup_interrupted_inside_pyzmq_does_not_hang_its_close() -> None:
    """A Ctrl-C inside pyzmq's ``Context.socket()`` (the socket made, the context not yet
    tracking it) used to hang ``close()`` for ever in ``term()``; found by the Ctrl-C tests under
    load.  The interrupted setup now ends at once, and its folder is gone."""
    proc = subprocess.run([sys.executable, "-c", ZMQ_INTERRUPTED_SETUP], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "RESULT interrupted" in proc.stdout and "LEFT []" in proc.stdout, proc.stdout
