"""The package builds as a user (or a release) would: ``python -m build`` makes an sdist and a wheel,
``twine check`` passes, and the wheel declares the built-in backends and payload kinds as entry points.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="builds in a subprocess: not inside an MPI job")


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="build is in the dev extra (pip install -e '.[dev]')")
    pytest.importorskip("twine", reason="twine is in the dev extra (pip install -e '.[dev]')")
    # build from a copy of the tracked files: the checkout stays untouched (no build/, no egg-info)
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((ROOT / name).read_bytes())
    out = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with zipfile.ZipFile(wheels[0]) as wheel:
        (ep_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points = wheel.read(ep_name).decode()
        assert "pytest_ipcbench/testing.py" in wheel.namelist() and "pytest_ipcbench/py.typed" in wheel.namelist()
    assert "[pytest_ipcbench.backends]" in entry_points and "[pytest_ipcbench.payloads]" in entry_points
    for name in ("lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue"):
        assert f"\n{name} = pytest_ipcbench.backends." in entry_points, name
    for name in ("dict", "ndarray", "array1d", "ragged2d", "tiny"):
        assert f"\n{name} = pytest_ipcbench.core.payloads:{name}_kind" in entry_points, name
