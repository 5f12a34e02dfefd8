"""``ipcbench clean``: leftovers of dead owners and of aborted MPICH jobs go; live ones stay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main as ipcbench
from pytest_ipcbench.core import cleanup, names
from pytest_ipcbench.core.cleanup import stale_mpich_segments
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.jobwatch import JobWatch
from pytest_ipcbench.shared import segment

MPIEXEC = Path(sys.executable).with_name("mpiexec")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _clean(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipcbench", "clean", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private /dev/shm and temp dir for ``clean`` (a real clean would judge other jobs' files)."""
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(names, "SHM_DIR", shm)
    monkeypatch.setattr(segment, "_SHM_DIR", str(shm))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(cleanup, "HYDRA_DIR", tmp)
    return tmp_path


def clean_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``ipcbench clean ARGS`` in this process (inside the sandbox): exit code and output."""
    code = ipcbench(["clean", *args])
    return code, capsys.readouterr().out


def test_clean_dry_run_lists_and_removes_nothing() -> None:
    dead = names.private_dir("lmdb", pid=_dead_pid())
    try:
        listed = _clean("--dry-run", "--min-age", "0")
        assert f"would remove {dead}" in listed and dead.exists()
    finally:
        names.remove(dead)


def test_clean_removes_what_a_dead_owner_left_and_keeps_a_live_one(sandbox: Path, capsys) -> None:
    dead = names.private_dir("lmdb", pid=_dead_pid())
    (dead / "data.mdb").write_bytes(b"x")
    live = names.private_dir("zmq")  # this process: alive
    code, listed = clean_here(capsys, "--dry-run", "--min-age", "0")
    assert code == 0 and str(dead) in listed and dead.exists()  # a dry run removes nothing
    code, out = clean_here(capsys, "--min-age", "0")
    assert code == 0 and f"removed {dead}" in out
    assert not dead.exists()
    assert live.exists() and str(live) not in out


def _old(path: Path, seconds: float = 7200) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file owned by another user")
def test_clean_takes_only_the_callers_files_unless_asked(sandbox: Path, capsys) -> None:
    theirs = _old(names.private_dir("lmdb", pid=_dead_pid()))
    os.chown(theirs, 65534, 65534)  # nobody's, as planted by another user
    code, out = clean_here(capsys)
    assert code == 0 and theirs.exists()
    assert f"skipped {theirs} (owned by uid 65534; --all-users to include it)" in out
    code, out = clean_here(capsys, "--all-users")
    assert f"removed {theirs}" in out and not theirs.exists()


def test_an_unknown_pid_of_an_older_name_counts_as_alive_unless_the_file_is_old(sandbox: Path, capsys) -> None:
    """A name without its owner's PID namespace (older versions, plugins' patterns): a pid not
    running here may be a live process in another PID namespace; only age tells."""
    def legacy(pid: int) -> Path:
        path = Path(tempfile.gettempdir()) / f"{names.PREFIX}-{pid}-{os.urandom(8).hex()}-lmdb"
        path.mkdir(mode=0o700)
        return path

    fresh = legacy(_dead_pid())
    old = _old(legacy(_dead_pid()))
    code, out = clean_here(capsys)
    assert f"removed {old}" in out and not old.exists()
    assert fresh.exists() and str(fresh) not in out


def test_a_dead_owner_of_this_namespace_is_reclaimed_at_once_unless_something_maps_it(sandbox: Path,
                                                                                    capsys) -> None:
    # `clean` waited an hour before it touched anything: a proven death needs no waiting
    import mmap

    dead = _dead_pid()
    fresh = names.private_dir("lmdb", pid=dead)
    (fresh / "data.mdb").write_bytes(b"x" * 4096)
    held = names.private_dir("lmdb", pid=dead)
    (held / "data.mdb").write_bytes(b"x" * 4096)
    with open(held / "data.mdb", "r+b") as f, mmap.mmap(f.fileno(), 4096) as view:  # a reader still maps it
        code, out = clean_here(capsys)
        assert f"removed {fresh}" in out and not fresh.exists()
        assert held.exists() and str(held) not in out
        del view
    code, out = clean_here(capsys)
    assert f"removed {held}" in out and not held.exists()


def test_a_dead_owner_s_folder_that_a_live_orphan_still_writes_into_is_kept(sandbox: Path, capsys) -> None:
    """calibrate SIGKILL'd: its orphaned run child kept writing into calibrate's scratch folder, which
    `clean` removed (the child made it again with mode 0755)."""
    scratch = names.private_dir("calibrate", pid=_dead_pid())
    (scratch / "aa-01").mkdir()
    orphan = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'w'); print(1, flush=True); "
                               "time.sleep(60)", str(scratch / "aa-01" / ".ipcbench.lock")], stdout=subprocess.PIPE)
    try:
        assert orphan.stdout.readline().strip() == b"1"
        code, out = clean_here(capsys, "--dry-run")
        assert str(scratch) not in out
        code, out = clean_here(capsys)
        assert scratch.exists() and str(scratch) not in out
    finally:
        orphan.kill()
        orphan.wait()
    code, out = clean_here(capsys)
    assert f"removed {scratch}" in out and not scratch.exists()


NAMESPACES = textwrap.dedent("""
    import json, mmap, os, subprocess, sys, time
    from pytest_ipcbench.core import names
    CLEAN = "import sys; from pytest_ipcbench.commands import main; sys.exit(main(['clean']))"
    # a live job: an LMDB folder, one of our segments, an MPICH segment it maps; all old
    lm = names.private_dir("lmdb")
    (lm / "data.mdb").write_bytes(b"x" * 4096)
    shm = names.SHM_DIR / names.resource_name("shm")
    shm.write_bytes(bytes(4096))
    mp = names.SHM_DIR / "mpich_shm_ipcbtest_0"
    mp.write_bytes(bytes(4096))
    f = open(mp, "r+b")
    view = mmap.mmap(f.fileno(), 4096)
    old = time.time() - 7200
    for p in (lm / "data.mdb", lm, shm, mp):
        os.utime(p, (old, old))
    unshare = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c"]
    inner = subprocess.run(unshare + [CLEAN], capture_output=True, text=True, timeout=60)
    live = sorted(str(p) for p in (lm, shm, mp) if p.exists())
    # a job of a child namespace that has ended: the initial namespace sees it is gone
    made = subprocess.run(unshare + ["from pytest_ipcbench.core import names; print(names.private_dir('zmq'))"],
                          capture_output=True, text=True, timeout=60)
    child = made.stdout.strip()
    outer = subprocess.run([sys.executable, "-c", CLEAN], capture_output=True, text=True, timeout=60)
    print(json.dumps({"inner": inner.stdout + inner.stderr, "live": live, "child": child, "made": made.stderr,
                      "outer": outer.stdout + outer.stderr, "child_left": os.path.exists(child),
                      "ours": [str(lm), str(shm), str(mp)]}))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for PID and mount namespaces (unshare)")
@pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")
def test_clean_from_another_pid_namespace_keeps_a_live_jobs_files(tmp_path: Path) -> None:
    """A pid that is not visible is not a dead pid: `clean` in a container removed a running
    job's MPICH segment and LMDB folder. Confined: a private /dev/shm and /tmp (mount namespace)."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    # what must stay visible under the private /tmp: this checkout and its venv when they live there
    # (a clean clone in /tmp, as CI may make), bound back from the real /tmp kept aside
    keep = sorted({str(Path(p).resolve()) for p in (sys.prefix, Path(__file__).resolve().parents[2])
                   if str(Path(p).resolve()).startswith("/tmp/")})
    aside = ' && mkdir /dev/shm/.real-tmp && mount --bind /tmp /dev/shm/.real-tmp' if keep else ''
    rebind = "".join(f' && mkdir -p "{p}" && mount --bind "/dev/shm/.real-tmp{p[len("/tmp"):]}" "{p}"' for p in keep)
    script = ('mount --make-rprivate / && mount -t tmpfs tmpfs /dev/shm' + aside + ' && mount -t tmpfs tmpfs /tmp'
              + rebind + ' || exit 99; exec "$@"')
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", sys.executable, "-c", NAMESPACES],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "TMPDIR": "/tmp"})
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a private tmpfs: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["live"] == sorted(got["ours"]), got["inner"]  # nothing of the live job removed
    for path in got["ours"]:
        assert f"skipped {path}" in got["inner"], got["inner"]
    assert "cannot be seen from here: it may be running; kept" in got["inner"]
    assert "this PID namespace cannot see every process" in got["inner"]
    assert got["child"] and not got["child_left"], got  # the ended namespace's folder: at once
    assert f"removed {got['child']}" in got["outer"], got["outer"]


def test_clean_skips_and_reports_odd_entries_and_cleans_the_rest(sandbox: Path, capsys, monkeypatch) -> None:
    dead = _dead_pid()
    fifo = names.SHM_DIR / f"{names.resource_name('nd', pid=dead)}"
    os.mkfifo(fifo)
    stuck = names.private_dir("zmq", pid=dead)
    (stuck / "router").write_bytes(b"")
    _old(stuck / "router")
    _old(stuck)
    leftover = _old(names.private_dir("lmdb", pid=dead))
    _old(fifo)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):  # as a non-root user meets a file it may not remove
        if os.path.basename(path) == "router":  # rmtree passes names relative to a dir_fd
            raise PermissionError(13, "Permission denied")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    code, out = clean_here(capsys)
    assert code == 0
    assert f"removed {leftover}" in out and not leftover.exists()
    assert f"skipped {fifo} (not a regular file)" in out and fifo.exists()
    assert f"skipped {stuck} (cannot remove it:" in out


def test_dry_run_lists_the_orphaned_shared_array_segments_that_clean_reclaims(sandbox: Path, capsys) -> None:
    import gc
    import pickle

    import numpy as np

    from pytest_ipcbench.shared import SharedNDArray

    arr = SharedNDArray.from_numpy_array(np.arange(1000.0), inline_below=0)
    mine = arr.segment_name
    pickle.dumps(arr)  # an in-transit reference that nobody will adopt
    del arr
    gc.collect()
    orphan = mine.replace(f"-{os.getpid()}", f"-{_dead_pid()}", 1)  # as if its creator died
    os.rename(names.SHM_DIR / mine, names.SHM_DIR / orphan)
    _old(names.SHM_DIR / orphan)
    code, out = clean_here(capsys, "--dry-run")
    assert f"would reclaim shared array {orphan}" in out and (names.SHM_DIR / orphan).exists()
    code, out = clean_here(capsys)
    assert f"reclaimed shared array {orphan}" in out and not (names.SHM_DIR / orphan).exists()


def test_an_old_unmapped_mpich_segment_is_stale_a_mapped_one_is_not() -> None:
    stale = names.SHM_DIR / f"mpich_shm_ipcbtest{os.getpid()}_0"
    mapped = names.SHM_DIR / f"mpich_shm_ipcbtest{os.getpid()}_1"
    import mmap

    try:
        for path in (stale, mapped):
            path.write_bytes(b"\0" * 4096)
            old = time.time() - 3600
            os.utime(path, (old, old))
        with open(mapped, "r+b") as f, mmap.mmap(f.fileno(), 4096) as view:
            found = {p.name for p in stale_mpich_segments()}
            assert stale.name in found
            assert mapped.name not in found
            del view
        fresh = {p.name for p in stale_mpich_segments(min_age=7200)}
        assert stale.name not in fresh  # too young for the default age rule
    finally:
        for path in (stale, mapped):
            Path(path).unlink(missing_ok=True)


def test_a_hydra_file_left_by_an_aborted_job_is_stale_only_when_no_launcher_runs() -> None:
    import pytest

    from pytest_ipcbench.core import cleanup

    if cleanup.launcher_running():
        pytest.skip("an MPICH launcher is running on this machine")
    left = cleanup.HYDRA_DIR / f"hydra_hwloc_xmlfile_ipcbtest{os.getpid()}"
    try:
        left.write_text("<topology/>")
        old = time.time() - 3600
        os.utime(left, (old, old))
        assert left in cleanup.stale_hydra_files()
        assert left not in cleanup.stale_hydra_files(ignore={left.name})
        assert left not in cleanup.stale_hydra_files(min_age=7200)
    finally:
        left.unlink(missing_ok=True)


ABORTS = textwrap.dedent("""
    import time
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Barrier()
    time.sleep(1.0)  # long enough for the watch to see the job
    if comm.Get_rank() == 1:
        comm.Abort(3)
    time.sleep(30)
""")


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
@pytest.mark.skipif(in_mpi_job(), reason="starts an MPI job of its own: not inside one")
def test_job_watch_claims_what_its_own_aborted_job_left_and_nothing_else(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    # another job's leftover, made while ours runs: unmapped and new, but not ours
    foreign = names.SHM_DIR / f"mpich_shm_ipcbtest{os.getpid()}_9"
    foreign.write_bytes(b"\0" * 4096)
    watch = JobWatch(interval=0.05).start()
    try:
        script = tmp_path / "aborts.py"
        script.write_text(ABORTS)
        proc = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script)],
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode != 0
        watch.stop()
        deadline = time.monotonic() + 20
        while watch.pending() and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = {p.name.split("_")[0] for p in watch.users}
        assert seen == {"mpich", "hydra"}, watch.users  # the job's segment and its Hydra file
        left = watch.leftovers()
        assert left and set(left) <= set(watch.users), (left, watch.users)  # the abort left some
        assert foreign not in left
    finally:
        watch.stop()
        for path in watch.leftovers():
            names.remove(path)
        foreign.unlink(missing_ok=True)


@pytest.mark.skipif(in_mpi_job(), reason="sends itself SIGINT: an MPI job's watchdog would hear it")
def test_a_ctrl_c_inside_interrupts_deferred_waits_for_the_block_and_a_second_one_does_not() -> None:
    import signal

    from pytest_ipcbench.core.names import interrupts_deferred

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here (ignored, or handled by someone else)")

    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the signal arrives here: held
            done.append("block finished")
    assert done == ["block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored

    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: at once (a hung block can be stopped)
            time.sleep(0.05)
            done.append("not reached")
    assert done == ["block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    with interrupts_deferred():  # no Ctrl-C: nothing raised
        done.append("quiet")
    assert done[-1] == "quiet"
