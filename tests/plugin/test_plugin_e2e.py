"""End to end: pytest run in a subprocess, under ``mpiexec`` or plain, checked by exit code and output.

These launch ``mpiexec`` themselves, so they run in the plain ``pytest`` phase and are skipped
inside an MPI job (they carry no ``mpi`` marker, so ``-m mpi`` does not select them either).
The hung-rank run mostly waits for its watchdog, so it starts in the background with the first
test of this module and is checked last.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

MPIEXEC = Path(sys.executable).with_name("mpiexec")
SUMMARY = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|no tests ran)\b.* in [\d.]+s.* =+$")
HANG_TEST = "test_a_hung_rank_ends_the_run_within_the_timeout"
HANG_TIMEOUT = 10  # the hung run's --ipc-timeout, s
ABORT_MARGIN = 20  # s after the timeout for the watchdog's grace to waiting ranks and MPI_Abort to end the job

# they start processes of their own: never nested inside an MPI job
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")
needs_mpiexec = pytest.mark.skipif(
    not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable} (install pytest-ipcbench[mpi])"
)


def mpi_command(n: int, *args: str) -> list[str]:
    return [str(MPIEXEC), "-n", str(n), sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi", *args]


def mpi_run(pytester: pytest.Pytester, n: int, *args: str, timeout: float = 120) -> pytest.RunResult:
    """``mpiexec -n N python -m pytest --with-mpi ARGS`` in the pytester folder."""
    pytest.importorskip("mpi4py")
    return pytester.run(*mpi_command(n, *args), timeout=timeout)


def summaries(lines: list[str]) -> list[str]:
    return [line for line in lines if SUMMARY.match(line.strip())]


def session_starts(lines: list[str]) -> int:
    # counted, not lines: ranks printing at once can put two headers on one line
    return sum(line.count("test session starts") for line in lines)


#: A summary anywhere in a line (ranks printing at once can join two on one line).
SUMMARY_ANYWHERE = re.compile(r"\b(?:passed|failed|errors?|skipped|no tests ran)\b[^=\n]* in [\d.]+s\b")


def summary_count(lines: list[str]) -> int:
    return sum(len(SUMMARY_ANYWHERE.findall(line)) for line in lines)


# ------------------------------------------------------------------- the hung rank, in background

HANGS = """
    import time
    from pathlib import Path
    from mpi4py import MPI

    def test_first():
        pass

    def test_rank_2_hangs():
        # when its watchdog started (CLOCK_MONOTONIC is one clock for the whole machine)
        Path(f"began-{MPI.COMM_WORLD.Get_rank()}").write_text(repr(time.monotonic()))
        if MPI.COMM_WORLD.Get_rank() == 2:
            time.sleep(600)

    def test_never_reached():
        pass
"""


SLEEP_LINE = textwrap.dedent(HANGS).splitlines().index("        time.sleep(600)") + 1


@pytest.fixture(scope="module", autouse=True)
def hang_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Start ``mpiexec -n 4`` on a test where rank 2 sleeps forever, if the hang test was selected."""
    run: dict = {}
    wanted = any(item.name == HANG_TEST for item in request.session.items)
    if not wanted or not MPIEXEC.exists() or in_mpi_job():
        yield run
        return
    folder = tmp_path_factory.mktemp("hang")
    (folder / "test_hang.py").write_text(textwrap.dedent(HANGS))
    out, err = open(folder / "stdout", "w+"), open(folder / "stderr", "w+")
    run.update(start=time.monotonic(), out=out, err=err)
    run["proc"] = subprocess.Popen(
        mpi_command(4, "--ipc-timeout", str(HANG_TIMEOUT)), cwd=folder, stdout=out, stderr=err, stdin=subprocess.DEVNULL
    )
    run["folder"] = folder

    def ended() -> None:  # the moment it ended, not the moment the test (last of the module) looks
        run["proc"].wait()
        run["end"] = time.monotonic()

    threading.Thread(target=ended, daemon=True).start()
    try:
        yield run
    finally:
        if run["proc"].poll() is None:
            run["proc"].kill()
            run["proc"].wait(10)
        out.close()
        err.close()


# ----------------------------------------------------------------------------------- MPI runs

RANK_2_FAILS = """
    import os, secrets
    from mpi4py import MPI

    RANK = MPI.COMM_WORLD.Get_rank()

    def test_first():
        pass

    def test_rank_2_fails():
        assert RANK != 2, "rank 2 disagrees"

    def test_after_the_failure():
        pass

    def test_group_of_each_size(ipc_group):
        assert RANK < ipc_group.size  # ranks outside a smaller group sit this one out
        assert ipc_group.allreduce(1) == ipc_group.size

    def test_leaves_a_file_on_rank_1():
        if RANK == 1:
            open(f"/dev/shm/ipcb-{os.getpid()}-{secrets.token_hex(8)}-leak", "w").close()
"""


@needs_mpiexec
def test_a_failure_on_rank_2_fails_the_test_on_every_rank_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rank2=RANK_2_FAILS)
    result = mpi_run(pytester, 4, "-rf")
    assert result.ret == 1, result.stdout.str() + result.stderr.str()
    # one summary, from rank 0; every other test ran (r2 and r4 of the group test)
    assert [line for line in summaries(result.outlines)] == [
        line for line in result.outlines if "1 failed, 5 passed" in line
    ], result.stdout.str()
    assert len(summaries(result.outlines)) == 1 and session_starts(result.outlines) == 1
    result.stdout.fnmatch_lines(
        [
            "*ipcbench: call failed on rank 2 of 4:*",
            "*rank 2: AssertionError: rank 2 disagrees*",
            "*ipcbench: resources left behind (removed now; the run fails)*",
            "rank 1: /dev/shm/ipcb-*-leak (owner pid *)",
            "*FAILED test_rank2.py::test_rank_2_fails - failed on rank 2*",
        ]
    )
    assert "idle" not in result.stdout.str()
    leaked = re.search(r"(/dev/shm/ipcb-\d+-[0-9a-f]+-leak)", result.stdout.str())
    assert leaked and not os.path.exists(leaked.group(1))


@needs_mpiexec
def test_a_dead_rank_ends_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_die="""
        import os
        from mpi4py import MPI

        def test_first():
            pass

        def test_rank_2_dies():
            if MPI.COMM_WORLD.Get_rank() == 2:
                os._exit(3)

        def test_never_reached():
            pass
        """
    )
    start = time.monotonic()
    result = mpi_run(pytester, 4, "--ipc-timeout", "10")
    assert result.ret != 0
    assert time.monotonic() - start < 60
    assert not summaries(result.outlines)


@needs_mpiexec
def test_user_example_under_mpiexec_prints_one_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        from pytest_ipcbench import deliver, assert_delivered

        def test_every_reader_gets_it(ipc_group, ipc_backend, ipc_payload):
            assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))
        """
    )
    result = mpi_run(
        pytester, 4, "-v", "--ipc-backends", "mpi-bcast,shm", "--ipc-payloads", "ndarray,tiny", "--ipc-sizes", "1MB"
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    (summary,) = summaries(result.outlines)
    assert "16 passed" in summary and "skipped" not in summary
    result.stdout.fnmatch_lines(["*test_every_reader_gets_it[[]shm-ndarray-1MB-r4-native[]] PASSED*"])
    assert session_starts(result.outlines) == 1


@needs_mpiexec
def test_ipc_bench_without_ipc_group_runs_on_a_smaller_group_instead_of_skipping(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bench_only="""
        def test_shm(ipc_bench, shm_backend, ipc_payload):
            result = ipc_bench(shm_backend, ipc_payload, time_budget=0.05)
            assert result.verified.failed == 0
        """
    )
    result = mpi_run(pytester, 4, "-v", "--ipc-ranks", "2,4", "--ipc-payloads", "tiny", "--ipc-modes", "bytes")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    (summary,) = summaries(result.outlines)
    assert "2 passed" in summary and "skipped" not in summary, summary
    result.stdout.fnmatch_lines(["*test_shm[[]*r2*[]] PASSED*"])


@needs_mpiexec
def test_all_ranks_output_and_usage_errors_under_mpi(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two="def test_x():\n    pass\n")
    loud = mpi_run(pytester, 2, "--ipc-all-ranks-output")
    assert loud.ret == 0 and summary_count(loud.outlines) == 2 and session_starts(loud.outlines) == 2, loud.outlines
    bad = mpi_run(pytester, 2, "--ipc-backends", "shmm")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert sum("--ipc-backends: unknown backend 'shmm'" in line for line in bad.errlines) == 1, bad.errlines


UNMARKED = """
    import pytest
    from mpi4py import MPI

    RANK = MPI.COMM_WORLD.Get_rank()

    def test_plain():
        open(f"ran-plain-{RANK}", "w").close()

    def test_plain_fails_on_rank_0():
        assert RANK != 0, "rank 0 says no"

    @pytest.mark.mpi
    def test_marked():
        open(f"ran-marked-{RANK}", "w").close()
"""


@needs_mpiexec
def test_unmarked_tests_run_once_on_rank_0_when_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unmarked=UNMARKED)
    once = mpi_run(pytester, 3, "--ipc-unmarked", "rank0")
    assert once.ret == 1, once.stdout.str() + once.stderr.str()
    ran = sorted(p.name for p in pytester.path.glob("ran-*"))
    assert ran == ["ran-marked-0", "ran-marked-1", "ran-marked-2", "ran-plain-0"]
    (summary,) = summaries(once.outlines)
    assert "1 failed, 2 passed" in summary, summary
    once.stdout.fnmatch_lines(["*tests without the mpi marker run on rank 0 only*"])
    for path in pytester.path.glob("ran-*"):
        path.unlink()
    every = mpi_run(pytester, 3)  # the default: pytest-mpi's behaviour, every rank runs them
    assert every.ret == 1
    ran = sorted(p.name for p in pytester.path.glob("ran-*"))
    assert ran == ["ran-marked-0", "ran-marked-1", "ran-marked-2", "ran-plain-0", "ran-plain-1", "ran-plain-2"]


COLLECTIVE_HANGS = """
    import time

    def body(group, who):
        if group.rank == 1 and who == "raises":
            raise ValueError("rank 1's own problem")
        if group.rank == (1 if who == "sleeps" else 0):
            time.sleep(600)  # never arrives at the next collective
        group.barrier()

    def test_hang(ipc_group, who):
        ipc_group.run(body, who)
"""


@needs_mpiexec
@pytest.mark.parametrize("who", ["sleeps", "raises"])
def test_the_watchdog_names_the_rank_that_did_not_arrive_and_shows_each_ranks_error(
    pytester: pytest.Pytester, who: str
) -> None:
    pytester.makepyfile(test_collective=COLLECTIVE_HANGS)
    pytester.makeconftest(f"import pytest\n\n@pytest.fixture\ndef who():\n    return {who!r}\n")
    result = mpi_run(pytester, 2, "--ipc-timeout", "6", "--ipc-ranks", "2", timeout=90)
    assert result.ret != 0
    err = result.stderr.str()
    if who == "sleeps":  # rank 1 sleeps in the body while rank 0 waits in the barrier
        assert "did not finish within 6 s on rank 1: rank 1 did not arrive" in err, err
        assert "rank 0 did not arrive" not in err, err
    else:  # rank 1 raised and went to the exchange; rank 0 sleeps: rank 1's error must show
        assert "rank 1 raised ValueError: rank 1's own problem (test_collective.py:5)" in err, err
        assert "did not finish within 6 s on rank 0: rank 0 did not arrive" in err, err


# ------------------------------------------------------------------------- plain (no MPI)


def test_local_run_collects_readable_ids_and_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_local="""
        from pytest_ipcbench import deliver, assert_delivered

        def test_every_reader_gets_it(ipc_group, ipc_backend, ipc_payload):
            assert_delivered(ipc_group.run(deliver, ipc_backend, ipc_payload))
        """
    )
    result = pytester.runpytest_subprocess(
        "-v", "--ipc-backends", "shm", "--ipc-payloads", "ndarray", "--ipc-sizes", "1MB", timeout=120
    )
    result.stdout.fnmatch_lines(
        [
            "*test_every_reader_gets_it[[]shm-ndarray-1MB-r2-bytes[]] PASSED*",
            "*test_every_reader_gets_it[[]shm-ndarray-1MB-r4-native[]] PASSED*",
        ]
    )
    result.assert_outcomes(passed=4)


def test_local_leftovers_fail_the_run_and_are_removed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_leak="""
        import os, secrets

        def leave_one(group=None):
            path = f"/dev/shm/ipcb-{os.getpid()}-{secrets.token_hex(8)}-leak"
            open(path, "w").close()
            return path

        def test_leaks_here():
            leave_one()

        def test_leaks_in_a_worker(ipc_group):
            paths = ipc_group.run(leave_one)
            assert len(paths) == ipc_group.size
        """
    )
    result = pytester.runpytest_subprocess("--ipc-ranks", "2", timeout=120)
    assert result.ret == 1
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "ipcbench: resources left behind (removed now; the run fails)" in out
    leaked = re.findall(r"(/dev/shm/ipcb-\d+-[0-9a-f]+-leak) \(owner pid (\d+)\)", out)
    assert len(leaked) == 3 and len({pid for _, pid in leaked}) == 2  # pytest's process and its worker
    assert not any(os.path.exists(path) for path, _ in leaked)


def test_what_was_there_before_the_run_is_not_blamed(pytester: pytest.Pytester) -> None:
    old = Path(f"/dev/shm/ipcb-{os.getpid()}-{os.urandom(8).hex()}-older")
    old.touch()
    try:
        pytester.makepyfile("def test_x():\n    pass\n")
        result = pytester.runpytest()  # in this process: same pid as the file's owner
        result.assert_outcomes(passed=1)
        assert result.ret == 0 and old.exists()
    finally:
        old.unlink()


# ---------------------------------------------------------------- last: the hung-rank run's verdict


@needs_mpiexec
def test_a_hung_rank_ends_the_run_within_the_timeout(hang_run: dict) -> None:
    proc = hang_run["proc"]
    try:
        proc.wait(timeout=max(1.0, 120 - (time.monotonic() - hang_run["start"])))
    except subprocess.TimeoutExpired:
        pytest.fail("the run with a hung rank did not end within 120 s")
    deadline = time.monotonic() + 5
    while "end" not in hang_run and time.monotonic() < deadline:
        time.sleep(0.01)
    hang_run["out"].seek(0)
    hang_run["err"].seek(0)
    out, err = hang_run["out"].read(), hang_run["err"].read()
    assert proc.returncode != 0
    # the bound is what was measured here: from the moment rank 2's hanging test began (its
    # watchdog's start), the configured timeout and a margin to abort the job; the start-up before
    # it is whatever the machine's load made it (it moved past 60 s in all at load 12)
    began = float((hang_run["folder"] / "began-2").read_text())
    startup, hung = began - hang_run["start"], hang_run["end"] - began
    assert hung < HANG_TIMEOUT + ABORT_MARGIN, (
        f"ended {hung:.1f} s after rank 2's test began (timeout {HANG_TIMEOUT} s; start-up {startup:.1f} s)")
    lines = err.splitlines()
    expected = [
        f"ipcbench: test_hang.py::test_rank_2_hangs did not finish within {HANG_TIMEOUT} s on rank 2: rank 2 did not arrive "
        "(its traceback follows) — a rank hung or died; aborting the MPI job",
        "*rank 2 was still in call*",
        f"*test_hang.py*line {SLEEP_LINE} in test_rank_2_hangs*",  # the stuck rank's traceback
    ]
    pytest.LineMatcher(lines).fnmatch_lines(expected)
    assert "test_never_reached" not in out and not summaries(out.splitlines())
