"""``mpiexec -n 2 pytest`` without ``--with-mpi`` ran two separate sessions and said nothing (issue
39): it is a usage error now, said once (by rank 0), naming the flag."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_ipcbench.core.group import in_mpi_job

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="runs mpiexec in a subprocess: not inside an MPI job")
MPIEXEC = Path(sys.executable).with_name("mpiexec")


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
def test_mpiexec_without_with_mpi_is_refused_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.run(str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          timeout=120)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    assert err.count("rank 0 of 2 started by mpiexec, without --with-mpi") == 1, err
    assert "Add --with-mpi" in err
    assert "1 passed" not in result.stdout.str()


def test_a_plain_run_and_one_rank_are_left_alone(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
