"""``ipcbench compare`` of two files from different runs (docs/method.md rule 19).

Two runs of identical code on a machine whose load changed between them differ by a load factor
(every case, and the in-run references, slower by the same amount) plus a between-run scatter
per case. Neither may be called a regression; a 2x slowdown of one backend still must be.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.history import compare
from pytest_ipcbench.history.results import Result, ResultSet

BACKENDS = ("lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue")
SIZES = (1_000, 100_000, 1_000_000)
N = 40


def run_set(seed: int, load: float = 1.0, scatter: float = 0.0, slow: dict[str, float] | None = None,
            references: bool = True, run_id: str | None = None) -> ResultSet:
    """One run: every backend x size x ranks, and (``references``) the in-run references.

    ``load`` multiplies every sample (cases and references: the machine was that much slower);
    ``scatter`` is a per-case between-run factor (lognormal sd); ``slow`` multiplies a backend's
    cases only (a change of the code).
    """
    rng = np.random.default_rng(seed)
    slow = slow or {}
    rs = ResultSet(env={"host": "test", "python": "3", "run_id": run_id or f"run-{seed}", "cores": 2,
                        "load_start": 0.2 * load, "load_end": 0.2 * load})
    for backend in BACKENDS:
        for size in SIZES:
            for ranks in (2, 4):
                median = 2e-6 * size ** 0.8 * (1 + 0.3 * ranks) * (1 + BACKENDS.index(backend) / 4)
                drift = float(rng.lognormal(0.0, scatter)) if scatter else 1.0
                f = load * drift * slow.get(backend, 1.0)
                r = Result("broadcast", backend, "bytes", "ndarray", size, ranks, {}, nbytes=size)
                r.samples["completion"] = list(median * f * rng.lognormal(0.0, 0.05, N))
                rs.add(r)
    if references:
        for size in (1, 10_000, 1_000_000, 64_000_000):
            rs.add(Result("copy", "numpy", "native", "buffer", size, 1,
                          {"copy": list(size / 5e9 * load * rng.lognormal(0.0, 0.03, N))}, nbytes=size, primary="copy"))
        for size in (1, 65536):
            rs.add(Result("reference", "pipe", "bytes", "buffer", size, 2,
                          {"latency": list((3e-6 + size / 2e9) * load * rng.lognormal(0.0, 0.05, N))},
                          nbytes=size, primary="latency"))
    return rs


def _slower_backends(comparison: compare.Comparison) -> set[str]:
    return {c.key.split("/")[1] for c in comparison.regressions}


def test_uniform_load_factor_is_not_a_regression() -> None:
    base, head = run_set(1), run_set(2, load=1.4)
    assert compare.compare_sets(base, head, paired=True).exit_code == 1  # the bare ratio cries wolf
    comparison = compare.compare_sets(base, head)
    assert not comparison.paired and comparison.drift is not None
    assert comparison.drift.factor == pytest.approx(1.4, rel=0.05)
    assert comparison.regressions == [] and comparison.exit_code == 0
    assert any("different runs" in w and "1.4" in w for w in comparison.warnings)


def test_two_x_slowdown_of_one_backend_is_still_caught_under_load_drift() -> None:
    base, head = run_set(1), run_set(2, load=1.4, scatter=0.05, slow={"zmq": 2.0})
    comparison = compare.compare_sets(base, head)
    assert _slower_backends(comparison) == {"zmq"}
    assert len(comparison.regressions) == len(SIZES) * 2
    assert comparison.exit_code == 1


def test_between_run_scatter_is_allowed_for_single_run_files() -> None:
    # identical code, load changed, and each case moved by its own 8% (sd): single-run files
    flagged_bare, flagged = 0, 0
    for seed in range(3):
        base, head = run_set(10 + seed), run_set(20 + seed, load=0.8, scatter=0.08)
        bare = compare.compare_sets(base, head, paired=True)
        flagged_bare += len(bare.regressions) + len(bare.with_status("faster"))
        comparison = compare.compare_sets(base, head)
        flagged += len(comparison.regressions)
        assert comparison.drift is not None and comparison.drift.widen("broadcast r2") > 1
    assert flagged_bare > 0  # without the correction the same files give verdicts
    assert flagged == 0


def test_runs_too_noisy_to_show_a_2x_slowdown_are_not_compared(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # an overloaded machine: identical cases move by 60% (sd) between runs
    base, head = run_set(1), run_set(2, scatter=0.6, slow={"zmq": 2.0})
    with pytest.raises(compare.NotComparable, match="not comparable"):
        compare.compare_sets(base, head)
    assert main(["compare", str(base.save(tmp_path / "b.json")), str(head.save(tmp_path / "h.json"))]) == 2
    assert "quiet machine" in capsys.readouterr().err


def test_references_are_listed_never_flagged() -> None:
    base, head = run_set(1), run_set(2, load=1.5)
    comparison = compare.compare_sets(base, head)
    refs = comparison.with_status("reference")
    assert {c.key.split("/")[0] for c in refs} == {"copy", "reference"}
    assert all("in-run reference" in c.note for c in refs)
    # paired or not, a reference never counts as a regression of the code
    assert not [c for c in compare.compare_sets(base, head, paired=True).regressions if c.key.startswith("copy/")]


def test_files_of_different_runs_without_references_are_refused(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    b = run_set(1, references=False).save(tmp_path / "b.json")
    h = run_set(2, references=False, slow={"zmq": 2.0}).save(tmp_path / "h.json")
    assert main(["compare", str(b), str(h)]) == 2
    err = capsys.readouterr().err
    assert "different runs" in err and "in-run reference" in err and "--paired" in err
    assert main(["compare", str(b), str(h), "--paired"]) == 1


def test_same_run_id_is_paired() -> None:
    base, head = run_set(1, run_id="x", references=False), run_set(2, run_id="x", references=False)
    comparison = compare.compare_sets(base, head)
    assert comparison.paired and comparison.drift is None and comparison.exit_code == 0


def test_load_difference_is_warned() -> None:
    base, head = run_set(1), run_set(2, load=8.0)
    comparison = compare.compare_sets(base, head)
    assert any("load differed" in w for w in comparison.warnings)
    assert comparison.exit_code == 0


def test_cli_compares_runs_and_says_how(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = run_set(1).save(tmp_path / "b.json")
    h = run_set(2, load=1.3).save(tmp_path / "h.json")
    assert main(["compare", str(b), str(h)]) == 0
    out = capsys.readouterr().out
    assert "different runs" in out and "widened" in out and "reference" in out


def test_comparison_repr_is_short() -> None:
    comparison = compare.compare_sets(run_set(1), run_set(2, load=1.2))
    text = repr(comparison)
    assert len(text) < 300 and "cases" in text and "load factor" in text
    assert math.isfinite(comparison.drift.noise["*"])  # type: ignore[union-attr]
