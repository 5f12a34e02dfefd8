"""Every output path of every command is checked as ``run --out`` is (core/outdir.py): no FIFO, no
link of another user, writable, room left, a name the filesystem takes; exit 2 naming it, nothing
half-written, nothing deleted or written through that the command did not create."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_ipcbench.commands import main as ipcbench
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.outdir import OutputFolderError, atomic_output, check_output_file, clear_own
from pytest_ipcbench.results.results import Result, ResultSet

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="starts its own processes: not inside an MPI job")
NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's link: needs root")


def results(folder: Path, name: str = "results.json") -> Path:
    rs = ResultSet()
    rs.add(Result("broadcast", "shm", "bytes", "ndarray", 1000, 2, {"completion": [1e-5] * 20}, nbytes=1000))
    return rs.save(folder / name)


def planted_link(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A link ``name`` owned by another user, pointing at a file of the caller's."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / name
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    return link, victim


def unblock(fifo: Path) -> threading.Thread:
    """Opens the FIFO for reading after a while: a command that blocked on it ends (the test fails, not hangs)."""
    def drain() -> None:
        threading.Event().wait(20)
        try:
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    return t


# ------------------------------------------------------------------------- gate --out never deletes


def test_a_report_folder_holding_files_the_gate_did_not_write_is_refused_not_emptied(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work\n")
    with pytest.raises(OutputFolderError, match=r"holds 1 file\(s\) this command did not write \(thesis.tex\)"):
        clear_own(out, ".mark", ("compare.md", "rounds"))
    assert (out / "thesis.tex").read_text() == "years of work\n"


def test_a_report_folder_the_gate_made_loses_only_the_gate_s_own_files(tmp_path: Path) -> None:
    out = clear_own(tmp_path / "report", ".mark", ("compare.md", "rounds"))
    (out / "compare.md").write_text("old\n")
    (out / "rounds" / "1-base").mkdir(parents=True)
    assert sorted(p.name for p in clear_own(out, ".mark", ("compare.md", "rounds")).iterdir()) == [".mark"]
    (out / "notes.txt").write_text("mine\n")  # the user's, put there later: kept, and the gate stops
    with pytest.raises(OutputFolderError, match="notes.txt"):
        clear_own(out, ".mark", ("compare.md", "rounds"))
    assert (out / "notes.txt").exists()


@root_only
def test_gate_out_given_another_user_s_link_writes_and_deletes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "roots-folder"
    target.mkdir()
    (target / "keep.txt").write_text("keep\n")
    link = tmp_path / "out"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(OutputFolderError, match="symlink"):
        clear_own(link, ".mark", ("compare.md",))
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


# ------------------------------------------------------------------------- files: links, FIFOs, room


@root_only
@pytest.mark.parametrize("command", ["compare", "calibrate-out", "calibrate-markdown"])
def test_an_output_file_that_is_another_user_s_link_is_exit_2_and_its_target_untouched(
        tmp_path: Path, capsys, command: str) -> None:
    link, victim = planted_link(tmp_path, "out.md")
    a = results(tmp_path, "a.json")
    argv = {"compare": ["compare", str(a), str(a), "--calibration", "none", "--markdown", str(link)],
            "calibrate-out": ["calibrate", "--from", str(a), str(a), str(a), "--out", str(link), "--plot", "none"],
            "calibrate-markdown": ["calibrate", "--from", str(a), str(a), str(a), "--out", str(tmp_path / "c.json"),
                                   "--markdown", str(link), "--plot", "none"]}[command]
    assert ipcbench(argv) == 2
    err = capsys.readouterr().err
    assert "symlink" in err and str(link) in err and "Traceback" not in err
    assert victim.read_text() == "precious\n" and link.is_symlink()
    assert not (tmp_path / "c.json").exists()  # refused before any work


@pytest.mark.parametrize("flag", ["compare --markdown", "calibrate --out", "calibrate --markdown", "calibrate --plot",
                                  "selfcheck --json"])
def test_a_fifo_as_an_output_is_exit_2_at_once(tmp_path: Path, capsys, flag: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    unblock(fifo)
    a = results(tmp_path, "a.json")
    cal = ["calibrate", "--from", str(a), str(a), str(a), "--out", str(tmp_path / "c.json")]
    argv = {"compare --markdown": ["compare", str(a), str(a), "--calibration", "none", "--markdown", str(fifo)],
            "calibrate --out": ["calibrate", "--from", str(a), str(a), str(a), "--out", str(fifo)],
            "calibrate --markdown": [*cal, "--markdown", str(fifo)],
            "calibrate --plot": [*cal, "--plot", str(fifo)],
            "selfcheck --json": ["selfcheck", "--json", str(fifo)]}[flag]
    assert ipcbench(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag.split()[1]}: {fifo} is a FIFO" in err
    assert not (tmp_path / "c.json").exists()


def test_an_output_name_longer_than_the_filesystem_takes_is_exit_2(tmp_path: Path, capsys) -> None:
    a = results(tmp_path, "a.json")
    long = tmp_path / ("x" * 300) / "c.json"
    assert ipcbench(["calibrate", "--from", str(a), str(a), str(a), "--out", str(long)]) == 2
    assert "is longer than the filesystem allows (255 bytes)" in capsys.readouterr().err
    assert ipcbench(["compare", str(tmp_path / ("y" * 300)), str(a)]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_exit_2(tmp_path: Path, capsys) -> None:
    a = results(tmp_path, "a.json")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert ipcbench(["compare", str(a), str(a), "--calibration", "none", "--markdown", str(ro / "x.md")]) == 2
    assert "cannot write into" in capsys.readouterr().err


def test_a_failed_write_leaves_neither_half_a_file_nor_a_temporary_one(tmp_path: Path) -> None:
    (tmp_path / "out.md").write_text("old\n")
    with pytest.raises(OutputFolderError, match=r"out.md: No space left on device"):
        with atomic_output(tmp_path / "out.md", "--markdown") as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"] and (tmp_path / "out.md").read_text() == "old\n"


def test_no_room_is_said_before_the_work(tmp_path: Path, monkeypatch) -> None:
    class Full:
        f_bavail, f_frsize = 10, 4096
    monkeypatch.setattr(os, "statvfs", lambda _: Full)
    with pytest.raises(OutputFolderError, match=r"--markdown: no room left in .* \(40 KiB free"):
        check_output_file(tmp_path / "x.md", "--markdown")


# ------------------------------------------------------------------------- run --out on a full disk

FULL_DISK = r"""
set -e
mount -t tmpfs -o size={size} tmpfs {mnt}
{setup}
cd {cwd}
{python} -m pytest_ipcbench run --out {mnt}/out {args} > {mnt}/../stdout 2> {mnt}/../stderr || echo $? > {mnt}/../rc
ls -a {mnt}/out > {mnt}/../listing 2>&1 || true
"""


def _in_small_tmpfs(tmp_path: Path, size: str, setup: str = "") -> tuple[str, str, str, str]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    args = "--quick --no-mpi --no-extras --scenarios broadcast --backends shm --kinds tiny --modes bytes " \
           "--ranks 2 --progress none --results-only --no-config"
    script = FULL_DISK.format(size=size, mnt=mnt, setup=setup, cwd=tmp_path, python=sys.executable, args=args)
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    read = lambda n: (tmp_path / n).read_text() if (tmp_path / n).exists() else ""  # noqa: E731
    return read("rc").strip(), read("stderr"), read("stdout"), read("listing")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a small tmpfs")
def test_run_out_on_a_disk_without_room_is_refused_before_the_matrix_runs(tmp_path: Path) -> None:
    rc, err, out, _ = _in_small_tmpfs(tmp_path, "4m")
    assert rc == "2", (err, out)
    assert "--out: no room left in" in err and "Traceback" not in err
    assert "results in" not in out  # nothing was run


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a small tmpfs")
def test_run_out_filled_while_the_matrix_ran_keeps_the_results_elsewhere_and_says_where(tmp_path: Path) -> None:
    # the room is there at the start (18 MiB free), gone when results.json is written: the disk is
    # filled as soon as the run has claimed its folder (its lock file), while the matrix runs
    filler = ("(i=0; while [ ! -e {mnt}/out/.ipcbench.lock ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; "
              "dd if=/dev/zero of={mnt}/filler bs=1M count=18 2>/dev/null || true) &")
    rc, err, out, listing = _in_small_tmpfs(tmp_path, "18m", setup=filler.format(mnt=tmp_path / "mnt"))
    assert rc == "1", (err, out)
    assert "the results were saved to" in err and "Traceback" not in err
    saved = Path(err.split("the results were saved to ", 1)[1].split(" instead")[0])
    try:
        assert json.loads(saved.read_text())["results"], "the results were kept"
    finally:
        shutil.rmtree(saved.parent, ignore_errors=True)
    assert not [n for n in listing.split() if n.startswith(".ipcbench-") and n != ".ipcbench.lock"]


# ------------------------------------------------------------------------- a nearly full /dev/shm

SMALL_SHM = r"""
set -e
mount -t tmpfs -o size=3m tmpfs /dev/shm
cd {cwd}
{python} -m pytest_ipcbench run --quick --no-extras --scenarios broadcast --backends shm --kinds tiny --modes bytes \
    --ranks 2 --progress none --results-only --no-config --out {cwd}/out > {cwd}/stdout 2> {cwd}/stderr || echo $? > {cwd}/rc
ls -a /dev/shm > {cwd}/listing
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounts a small tmpfs on /dev/shm")
def test_a_nearly_full_dev_shm_is_named_before_mpich_dies_of_it(tmp_path: Path) -> None:
    """MPICH died at init with SIGBUS, in a message that never named /dev/shm, leaving mpich_shm_*."""
    proc = subprocess.run(["unshare", "-m", "sh", "-c", SMALL_SHM.format(cwd=tmp_path, python=sys.executable)],
                          capture_output=True, text=True, timeout=300)
    if "mount" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    err = (tmp_path / "stderr").read_text()
    assert (tmp_path / "rc").read_text().strip() == "2", err
    assert "/dev/shm has 3 MiB free, an MPI job of 2 ranks needs about 8 MiB" in err and "Traceback" not in err
    assert not [n for n in (tmp_path / "listing").read_text().split() if n.startswith("mpich_shm_")]
