"""Faults and hostile surroundings of a pytest run (issue 24): planted links, crashing plugins.

They start pytest (under ``mpiexec`` too) in subprocesses, so they are skipped inside an MPI job.
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_ipcbench.core import names
from pytest_ipcbench.core.group import in_mpi_job

MPIEXEC = Path(sys.executable).with_name("mpiexec")

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI", "HYDRA", "PYTEST_"))}
    env.update(extra)
    return env


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a symlink owned by another user")
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_a_ranks_temp_folder_planted_as_another_users_symlink_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    tmp = tmp_path / "tmp"
    victim = tmp_path / "victim"
    (tmp / f"pytest-of-{getpass.getuser()}").mkdir(parents=True, mode=0o700)
    victim.mkdir()
    link = tmp / f"pytest-of-{getpass.getuser()}" / "rank1"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    (tmp_path / "test_t.py").write_text("def test_x(tmp_path):\n    (tmp_path / 'f').write_text('x')\n")
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi",
         "-q", "test_t.py"],
        cwd=tmp_path, env=_clean_env(TMPDIR=str(tmp)), capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"rank 1's temp folder: {link} is a symlink that" in out, out
    assert "belongs to uid 65534" in out
    assert list(victim.iterdir()) == [], out  # nothing written where the link's owner pointed it


def test_pytest_refuses_sizes_that_do_not_fit_with_every_ranks_copies(tmp_path: Path) -> None:
    from pytest_ipcbench.core.units import available_memory

    if 9 * 10 * 2**30 < available_memory():
        pytest.skip("this machine has room for 9 copies of 10 GiB")
    (tmp_path / "test_t.py").write_text("def test_x(ipc_group):\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_t.py",
                           "--ipc-sizes", "1KB,10GiB", "--ipc-ranks", "2,4"],
                          cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # a usage error, before any test
    assert "--ipc-sizes: size 10GiB (10.7 GB) with 4 ranks needs about 96.6 GB" in proc.stderr, proc.stderr


@pytest.mark.parametrize("where", ["marker", "ipc_bench"])
def test_sizes_of_a_marker_or_of_ipc_bench_pass_the_same_admission(tmp_path: Path, where: str) -> None:
    """Only the options' sizes were admitted: a marker's 10GiB with 4 ranks went on to the OOM killer."""
    from pytest_ipcbench.core.units import available_memory

    if 9 * 10 * 2**30 < available_memory():
        pytest.skip("this machine has room for 9 copies of 10 GiB")
    if where == "marker":
        body = ("import pytest\n@pytest.mark.ipcbench(sizes=['10GiB'], ranks=[4])\n"
                "def test_x(ipc_payload, ipc_ranks):\n    pass\n")
        expect = r"test_t.py::test_x: @pytest.mark.ipcbench\(sizes=...\): size 10GiB \(10.7 GB\) with 4 ranks needs about"
    else:
        body = ("import pytest\n@pytest.mark.ipcbench(ranks=[4])\n"
                "def test_x(ipc_bench, ipc_group):\n    ipc_bench('lmdb', ('ndarray', '10GiB'))\n")
        expect = r"test_t.py::test_x\[r4\]: ipc_bench\(...\) size 10GiB \(10.7 GB\) with 4 ranks needs about"
    (tmp_path / "test_t.py").write_text(body)

    def at_most_8gib() -> None:  # were the size admitted after all: a MemoryError, not the OOM killer
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))

    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_t.py"],
                          cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120,
                          preexec_fn=at_most_8gib)
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 5), out
    assert re.search(expect + r" 96.6 GB \(9 copies: 2 a rank and 1 shared\), but [\d.]+ GB of memory is available", out), out


KILLED = textwrap.dedent("""
    import os, signal, time
    from pathlib import Path
    from mpi4py import MPI
    from pytest_ipcbench.core import names

    def test_rank_1_is_killed():
        comm = MPI.COMM_WORLD
        mine = names.private_dir("lmdb")  # a resource of ours on every rank
        maps = [l.split()[-1] for l in open("/proc/self/maps") if "/dev/shm/mpich_shm_" in l]
        Path(os.environ["RECORD"], f"rank{comm.rank}").write_text("\\n".join([str(os.getpid()), str(mine), *maps]))
        comm.Barrier()
        time.sleep(2)  # mid-run: every rank's reaper is up
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)
""")


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_a_killed_rank_under_mpiexec_is_named_and_the_job_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL of one rank left mpich_shm_* segments in 16 of 16 tries and our folders in 6 of 6:
    Hydra kills the other ranks too, so nobody inside the job cleans. Each rank's reaper does."""
    pytest.importorskip("mpi4py")
    record = tmp_path / "record"
    record.mkdir()
    (tmp_path / "test_k.py").write_text(KILLED)
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "3", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi", "-q",
         "test_k.py"], cwd=tmp_path, env=_clean_env(RECORD=str(record)), capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    rows = {p.name: p.read_text().splitlines() for p in record.iterdir()}
    assert set(rows) == {"rank0", "rank1", "rank2"}, out
    victim = int(rows["rank1"][0])
    # how: read from the rank's zombie when the reaper wakes before Hydra's proxy reaps it (a race
    # on a busy machine); which: always
    assert re.search(rf"ipcbench: rank 1 \(pid {victim}\)( first)? (was killed by signal 9 \(SIGKILL\)|"
                     r"ended without finishing \(killed or crashed\))", out), out
    ours = [Path(r[1]) for r in rows.values()]
    segments = {Path(s) for r in rows.values() for s in r[2:]}
    deadline = time.monotonic() + 15  # the reapers wait for the node's other ranks, then remove
    while time.monotonic() < deadline and any(p.exists() for p in [*ours, *segments]):
        time.sleep(0.2)
    left = [str(p) for p in [*ours, *segments] if p.exists()]
    for p in left:  # never left behind by the test itself
        names.remove(p)
    assert left == [], out


EXITS = textwrap.dedent("""
    import os
    import pytest

    @pytest.mark.mpi
    def test_a_reader_that_ends_its_process():
        os._exit(0)  # every rank: as a plugin's reader that thinks it runs in a child of its own

    def test_never_reached():
        pass
""")


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_ranks_that_leave_by_os_exit_0_mid_test_fail_the_job(tmp_path: Path) -> None:
    """Every rank's os._exit(0) made mpiexec exit 0 with no summary: CI passed a run that never ended."""
    pytest.importorskip("mpi4py")
    (tmp_path / "test_e.py").write_text(EXITS)
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi", "-q",
         "test_e.py"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    # the rank's own line may be lost when Hydra ends the job before forwarding it; then its reaper
    # names the exit the guard turned 0 into (or that it ended without finishing)
    assert ("called os._exit(0) before its pytest session ended" in out or "ended without finishing" in out
            or re.search(r"rank \d \(pid \d+\) exited with code 1", out)), out


BARRIERS = textwrap.dedent("""
    import time
    from pathlib import Path
    import pytest

    @pytest.mark.mpi
    def test_loop():
        from mpi4py import MPI
        Path(f"rank{MPI.COMM_WORLD.rank}.pid").write_text(str(__import__("os").getpid()))
        for _ in range(1200):
            MPI.COMM_WORLD.Barrier()
            time.sleep(0.1)
""")


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_a_ctrl_c_to_one_rank_ends_the_job_within_the_interrupt_grace(tmp_path: Path) -> None:
    """SIGINT to rank 1 of 4: the other ranks waited in a collective until their watchdog (289-303 s)."""
    import signal

    pytest.importorskip("mpi4py")
    (tmp_path / "test_b.py").write_text(BARRIERS)
    job = subprocess.Popen([str(MPIEXEC), "-n", "4", sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                            "--with-mpi", "-q", "test_b.py"], cwd=tmp_path, env=_clean_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "rank1.pid").exists():
            time.sleep(0.1)
        time.sleep(1)
        os.kill(int((tmp_path / "rank1.pid").read_text()), signal.SIGINT)
        out, _ = job.communicate(timeout=60)  # the watchdog's interrupt grace is 10 s; the test timeout 300
        assert job.returncode == 2, out
        assert "ipcbench: rank 1 was interrupted: ending the MPI job" in out
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
