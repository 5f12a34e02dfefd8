"""End to end: pytest run in a subprocess, under ``mpiexec`` or plain, checked by exit code and output.

These launch ``mpiexec`` themselves, so they run in the plain ``pytest`` phase and are skipped
inside an MPI job (they carry no ``mpi`` marker, so ``-m mpi`` does not select them either).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from pytest_ipcbench.group import in_mpi_job

MPIEXEC = Path(sys.executable).with_name("mpiexec")
SUMMARY = re.compile(r"^=+ .*\b(passed|failed|error|errors|skipped|no tests ran)\b.* in [\d.]+s.* =+$")

# they start processes of their own: never nested inside an MPI job
pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs pytest in a subprocess: not inside an MPI job")
needs_mpiexec = pytest.mark.skipif(
    not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable} (install pytest-ipcbench[mpi])"
)


def mpi_run(pytester: pytest.Pytester, n: int, *args: str, timeout: float = 90) -> pytest.RunResult:
    """``mpiexec -n N python -m pytest --with-mpi ARGS`` in the pytester folder."""
    pytest.importorskip("mpi4py")
    return pytester.run(
        str(MPIEXEC), "-n", str(n), sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--with-mpi",
        *args, timeout=timeout,
    )


def summaries(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if SUMMARY.match(line.strip())]


def session_starts(result: pytest.RunResult) -> int:
    return sum("test session starts" in line for line in result.outlines)


RANK_2_FAILS = """
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
"""


@needs_mpiexec
def test_a_failure_on_rank_2_fails_the_test_on_every_rank_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rank2=RANK_2_FAILS)
    result = mpi_run(pytester, 4, "-rf")
    assert result.ret == 1, result.stdout.str() + result.stderr.str()
    assert summaries(result) == [
        line for line in result.outlines if "1 failed, 4 passed" in line
    ], result.stdout.str()
    assert len(summaries(result)) == 1 and session_starts(result) == 1  # only rank 0 prints
    result.stdout.fnmatch_lines(
        [
            "*ipcbench: call failed on rank 2 of 4:*",
            "*rank 2: AssertionError: rank 2 disagrees*",
            "*FAILED test_rank2.py::test_rank_2_fails - failed on rank 2*",
        ]
    )
    assert "idle" not in result.stdout.str()


@needs_mpiexec
def test_a_hung_rank_ends_the_run_within_the_timeout(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_hang="""
        import time
        from mpi4py import MPI

        def test_first():
            pass

        def test_rank_2_hangs():
            if MPI.COMM_WORLD.Get_rank() == 2:
                time.sleep(600)

        def test_never_reached():
            pass
        """
    )
    start = time.monotonic()
    result = mpi_run(pytester, 4, "--ipc-timeout", "10", timeout=120)
    took = time.monotonic() - start
    assert result.ret != 0
    assert took < 60, took
    result.stderr.fnmatch_lines(
        [
            "ipcbench: test_hang.py::test_rank_2_hangs did not finish within 10 s on rank 2 "
            "— a rank hung or died; aborting the MPI job",
            "*rank 2 was still in call*",
            "*test_hang.py*line 9 in test_rank_2_hangs*",  # the stuck rank's traceback
        ]
    )
    assert "test_never_reached" not in result.stdout.str()


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
    result = mpi_run(pytester, 4, "--ipc-timeout", "10", timeout=120)
    assert result.ret != 0
    assert time.monotonic() - start < 60
    assert not summaries(result)


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
    (summary,) = summaries(result)
    assert "16 passed" in summary and "skipped" not in summary
    result.stdout.fnmatch_lines(["*test_every_reader_gets_it[[]shm-ndarray-1MB-r4-native[]] PASSED*"])
    assert session_starts(result) == 1


@needs_mpiexec
def test_leftovers_under_mpi_fail_the_run_and_name_the_rank(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_leak_mpi="""
        import os, secrets
        from mpi4py import MPI

        def test_leaks_on_rank_1():
            if MPI.COMM_WORLD.Get_rank() == 1:
                open(f"/dev/shm/ipcb-{os.getpid()}-{secrets.token_hex(8)}-leak", "w").close()
        """
    )
    result = mpi_run(pytester, 2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*ipcbench: resources left behind (removed now; the run fails)*", "rank 1: /dev/shm/ipcb-*-leak (owner pid *)"]
    )
    assert len(summaries(result)) == 1


@needs_mpiexec
def test_all_ranks_output_and_usage_errors_under_mpi(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two="def test_x():\n    pass\n")
    loud = mpi_run(pytester, 2, "--ipc-all-ranks-output")
    assert loud.ret == 0 and len(summaries(loud)) == 2 and session_starts(loud) == 2
    bad = mpi_run(pytester, 2, "--ipc-backends", "shmm")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert sum("--ipc-backends: unknown backend 'shmm'" in line for line in bad.errlines) == 1, bad.errlines


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
        import os, secrets, glob

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
