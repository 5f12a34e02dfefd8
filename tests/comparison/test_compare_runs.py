"""``ipcbench compare`` of two files from different runs (docs/method.md rules 19, 21).

Two runs of identical code on a machine whose load changed between them differ by a load factor
(every case, and the in-run references, slower by the same amount) plus a between-run scatter
per case. Neither may be called a regression; a real slowdown must be, once the between-run noise
is known (a calibration of A/A runs), and a slowdown that touches every case is no noise. Without
a calibration, what the assumed noise cannot decide is inconclusive, never refused.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.comparison import (
    calibration as cal,
    calibration_summary as tell,
    compare,
    compare_notes,
    run_sets,
    verdict,
    verdict_text,
)
from pytest_ipcbench.results.results import Result, ResultSet

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


def _slower_backends(comparison: verdict.Comparison) -> set[str]:
    return {c.key.split("/")[1] for c in comparison.regressions}


def calibrated(scatter: float, runs: int = 8, seed: int = 500) -> cal.Calibration:
    """A calibration measured on ``runs`` synthetic A/A runs that scatter by ``scatter`` (sd)."""
    return cal.calibrate_sets([run_set(seed + i, load=1.0 + 0.1 * (i % 3), scatter=scatter) for i in range(runs)],
                              0.10, {"host": "test", "cores": 2})


def _false(comparison: verdict.Comparison) -> int:
    return len(comparison.regressions) + len(comparison.with_status("faster"))


def test_uniform_load_factor_is_not_a_regression() -> None:
    base, head = run_set(1), run_set(2, load=1.4)
    comparison = compare.compare_sets(base, head)
    assert not comparison.paired and comparison.normalisation is not None and comparison.normalisation.used
    assert comparison.normalisation.factor == pytest.approx(1.4, rel=0.05)
    n = comparison.normalisation
    assert n.low <= n.factor <= n.high
    assert _false(comparison) == 0 and comparison.exit_code == 3
    assert any("different runs" in w and "1.4" in w for w in comparison.warnings)


def test_a_slowdown_of_every_case_is_caught_not_read_as_noise() -> None:
    # the case: head's writer 2x slower everywhere; the references did not move
    base, head = run_set(1), run_set(2, scatter=0.05, slow={b: 2.0 for b in BACKENDS})
    comparison = compare.compare_sets(base, head, calibration=calibrated(0.05))
    cases = [c for c in comparison.cases if c.status != "reference"]
    assert all(c.status == "slower" for c in cases), verdict_text.format_table(comparison)
    assert comparison.exit_code == 1


def test_two_x_slowdown_of_one_backend_is_caught_under_load_drift_when_calibrated() -> None:
    base, head = run_set(1), run_set(2, load=1.4, scatter=0.05, slow={"zmq": 2.0})
    comparison = compare.compare_sets(base, head, calibration=calibrated(0.05))
    assert _slower_backends(comparison) == {"zmq"}
    assert len(comparison.regressions) == len(SIZES) * 2
    assert comparison.exit_code == 1
    assert all(c.detectable is not None and c.detectable < 2.0 for c in comparison.regressions)


def test_without_calibration_modest_changes_are_inconclusive_not_guessed() -> None:
    base, head = run_set(1), run_set(2, load=1.4, scatter=0.05, slow={"zmq": 1.5})
    comparison = compare.compare_sets(base, head)
    zmq = [c for c in comparison.cases if c.key.split("/")[1] == "zmq"]
    assert {c.status for c in zmq} == {"inconclusive"} and comparison.exit_code == 3
    assert all("assumed" in c.noise_source for c in zmq)
    assert any("no calibration" in w and "ipcbench calibrate" in w for w in comparison.warnings)
    # even a change far beyond the assumed noise is only said to look slower: nothing measured the noise
    huge = compare.compare_sets(base, run_set(2, slow={"zmq": 20.0}))
    assert huge.exit_code == 3 and huge.regressions == []
    assert all("looks slower" in c.note for c in huge.cases if c.key.split("/")[1] == "zmq")


def test_identical_code_gives_no_verdict_over_many_pairs_calibrated_or_not() -> None:
    calibration = calibrated(0.08)
    false_plain = false_cal = 0
    for seed in range(6):
        base, head = run_set(10 + seed, scatter=0.08), run_set(20 + seed, load=0.8, scatter=0.08)
        false_plain += _false(compare.compare_sets(base, head))
        false_cal += _false(compare.compare_sets(base, head, calibration=calibration))
        bare = compare.compare_sets(base, head, paired=True)  # still noise-aware: not one experiment
        false_plain += _false(bare)
    assert false_plain == 0 and false_cal == 0


def test_very_noisy_runs_are_inconclusive_per_case_never_refused(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # an overloaded machine: identical cases move by 60% (sd) between runs; calibrated as such
    base, head = run_set(1), run_set(2, scatter=0.6, slow={"zmq": 2.0})
    comparison = compare.compare_sets(base, head, calibration=calibrated(0.6))
    assert comparison.counts()["inconclusive"] > 0 and comparison.counts()["slower"] == 0
    b, h = str(base.save(tmp_path / "b.json")), str(head.save(tmp_path / "h.json"))
    assert main(["compare", b, h]) == 3
    out = capsys.readouterr().out
    assert "inconclusive" in out and "detects" in out and "not comparable" not in out


def test_one_volatile_reference_does_not_scale_every_ratio() -> None:
    base, head = run_set(1), run_set(2)
    for r in head.results:
        if r.scenario == "reference" and r.size == 1:  # the 1 B pipe moved 7.6x
            r.samples["latency"] = [x * 7.6 for x in r.samples["latency"]]
    comparison = compare.compare_sets(base, head)
    assert comparison.normalisation is not None and comparison.normalisation.factor < 1.1
    assert _false(comparison) == 0


def test_too_few_references_are_not_used() -> None:
    base, head = run_set(1, references=False), run_set(2, references=False, slow={"zmq": 20.0})
    for rs in (base, head):
        rs.add(Result("reference", "pipe", "bytes", "buffer", 1, 2, {"latency": [3e-6] * 10}, nbytes=1,
                      primary="latency"))
    comparison = compare.compare_sets(base, head)
    assert comparison.normalisation is not None and not comparison.normalisation.used
    assert any("not normalised" in w for w in comparison.warnings)
    assert _slower_backends(comparison) == set()  # uncalibrated: looks slower, inconclusive
    assert _slower_backends(compare.compare_sets(base, head, calibration=calibrated(0.05))) == {"zmq"}


def test_references_are_listed_never_flagged() -> None:
    base, head = run_set(1), run_set(2, load=1.5)
    comparison = compare.compare_sets(base, head)
    refs = comparison.with_status("reference")
    assert {c.key.split("/")[0] for c in refs} == {"copy", "reference"}
    assert all("in-run reference" in c.note for c in refs)
    assert not [c for c in compare.compare_sets(base, head, paired=True).regressions if c.key.startswith("copy/")]


def test_files_of_different_runs_without_references_are_compared_with_the_noise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = run_set(1, references=False).save(tmp_path / "b.json")
    h = run_set(2, references=False, slow={"zmq": 1.5}).save(tmp_path / "h.json")
    assert main(["compare", str(b), str(h)]) == 3
    out = capsys.readouterr().out
    assert "not normalised" in out and "inconclusive" in out
    assert main(["compare", str(b), str(h), "--paired"]) == 3  # --paired no longer drops the between-run noise
    assert "--paired" in capsys.readouterr().out


def test_same_run_id_is_paired() -> None:
    base, head = run_set(1, run_id="x", references=False), run_set(2, run_id="x", references=False)
    comparison = compare.compare_sets(base, head)
    assert comparison.paired and comparison.normalisation is None and comparison.exit_code == 0


def test_load_difference_is_warned() -> None:
    base, head = run_set(1), run_set(2, load=8.0)
    comparison = compare.compare_sets(base, head)
    assert any("load differed" in w for w in comparison.warnings)
    assert comparison.exit_code == 3


def test_runs_in_different_host_states_are_named() -> None:
    # a 1 MiB copy between two CPUs, fast while the host runs them near each other, slow far apart
    near, far, slightly = [19e-6, 19.5e-6], [33e-6, 38e-6], [20e-6, 21e-6]
    base, head = run_set(1), run_set(2)
    base.env["cross_cpu_copy_s"], head.env["cross_cpu_copy_s"] = near, far
    warned = [w for w in compare.compare_sets(base, head).warnings if "between this machine's CPUs" in w]
    assert len(warned) == 1 and "base 19 µs," in warned[0] and "head 33 µs to 38 µs" in warned[0], warned
    head.env["cross_cpu_copy_s"] = slightly
    assert not [w for w in compare.compare_sets(base, head).warnings if "between this machine's CPUs" in w]
    # several runs a side keep each run's probe: one far run among near ones is named too
    bases, heads = _runs(range(100, 105), 0), _runs(range(200, 205), 1)
    for i, rs in enumerate(bases + heads):
        rs.env["cross_cpu_copy_s"] = far if i == 7 else near
    merged_base, merged_head = run_sets.merge_runs(bases), run_sets.merge_runs(heads)
    assert [r["cross_cpu_copy_s"] for r in run_sets.runs_of(merged_head)][2] == far
    warned = [w for w in compare.compare_sets(merged_base, merged_head).warnings if "between this machine's CPUs" in w]
    assert len(warned) == 1 and "head 19 µs to 38 µs" in warned[0], warned
    # a run whose start and end met different host states says so itself (ipcbench run's last lines)
    assert "18 µs at the start, 28 µs at the end" in (compare_notes.host_state_change([18e-6, 28e-6]) or "")
    assert compare_notes.host_state_change([18e-6, 19e-6]) is None and compare_notes.host_state_change([None, 28e-6]) is None
    # a gate's rounds alternate within one experiment: no such note
    gate_base, gate_head = run_set(1, run_id="x"), run_set(2, run_id="x")
    gate_base.env["cross_cpu_copy_s"], gate_head.env["cross_cpu_copy_s"] = near, far
    assert not [w for w in compare.compare_sets(gate_base, gate_head).warnings if "between this machine's CPUs" in w]


def test_calibration_from_another_machine_is_ignored() -> None:
    calibration = calibrated(0.05)
    calibration.env["cores"] = 64
    comparison = compare.compare_sets(run_set(1), run_set(2, slow={"zmq": 2.0}), calibration=calibration)
    assert comparison.calibration is None and any("ignored" in w for w in comparison.warnings)
    assert comparison.exit_code == 3  # without it, 2x is inside the assumed noise: inconclusive


def test_cli_reads_the_calibration_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    b = run_set(1).save(tmp_path / "b.json")
    h = run_set(2, load=1.3, scatter=0.05, slow={"zmq": 2.0}).save(tmp_path / "h.json")
    path = calibrated(0.05).save(tmp_path / "cal.json")
    assert main(["compare", str(b), str(h), "--calibration", str(path)]) == 1
    out = capsys.readouterr().out
    assert "calibrated" in out and "REGRESSION" in out
    monkeypatch.chdir(tmp_path)  # a file in the working folder is never read unless named
    (tmp_path / ".ipcbench").mkdir()
    calibrated(0.05).save(tmp_path / ".ipcbench" / "calibration.json")
    assert main(["compare", str(b), str(h)]) == 3
    assert main(["compare", str(b), str(h), "--calibration", "none"]) == 3
    capsys.readouterr()
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    assert main(["compare", str(b), str(h), "--calibration", str(tmp_path / "bad.json")]) == 2
    assert "not a calibration file" in capsys.readouterr().err


def test_comparison_repr_is_short() -> None:
    comparison = compare.compare_sets(run_set(1), run_set(2, load=1.2))
    text = repr(comparison)
    assert len(text) < 300 and "cases" in text and "load factor" in text
    assert all(math.isfinite(c.noise) for c in comparison.cases if c.interval is not None)


def test_a_run_that_shared_the_machine_more_than_the_calibrations_gets_no_time_verdict() -> None:
    """Quiet calibration runs say nothing of a run during which other processes took 8% of the
    CPUs (such a run read shm's 1 KB cases 3-7x slower): its cases get no time verdict."""
    runs = [run_set(500 + i, scatter=0.05) for i in range(6)]
    for i, rs in enumerate(runs):
        rs.env["others_cpu_share"] = 0.01 * (i % 2)
    calibration = cal.calibrate_sets(runs, 0.10, {"host": "test", "cores": 2})
    assert calibration.env["others_cpu_share"] == [0.0, 0.005, 0.01]
    base, head = run_set(1), run_set(2, slow={"shm": 3.0})
    base.env["others_cpu_share"] = 0.0
    head.env["others_cpu_share"] = 0.01
    assert _slower_backends(compare.compare_sets(base, head, calibration=calibration)) == {"shm"}
    head.env["others_cpu_share"] = 0.08
    shared = compare.compare_sets(base, head, calibration=calibration)
    assert shared.regressions == [] and shared.exit_code == 3, verdict_text.format_table(shared)
    shm = [c for c in shared.cases if "/shm/" in c.key]
    assert shm and all(c.status == "inconclusive" and "looks slower" in c.note for c in shm)
    assert any("head: other processes took 8% of the CPUs" in w for w in shared.warnings)


def test_calibrate_counts_false_verdicts_on_held_out_pairs_and_compare_says_so(tmp_path: Path) -> None:
    """A case steady in most runs that runs 3x slower in one: the calibrations made without that
    run promise it steady, and the pair that holds it gets a false verdict. The held-out check
    counts it; compare then warns that its verdicts across runs are not to be trusted."""
    steady = [run_set(700 + i, scatter=0.02) for i in range(7)]
    z = 3.7
    assert tell.held_out_false(steady[:4], 0.10, z) == {}  # fewer than 5 runs: not checked
    quiet = tell.held_out_false(steady, 0.10, z)
    assert quiet and sum(v[0] for v in quiet.values()) == 0 and sum(v[1] for v in quiet.values()) > 0
    moody = [run_set(700 + i, scatter=0.02) for i in range(7)]
    victim = next(r for r in moody[5].results if r.backend == "zmq" and r.size == 1_000)
    victim.samples["completion"] = [3 * x for x in victim.samples["completion"]]
    held = tell.held_out_false(moody, 0.10, z)
    assert sum(v[0] for v in held.values()) >= 1, held
    calibration = cal.calibrate_sets(moody, 0.10, {"host": "test", "cores": 2})
    assert calibration.held_out_note() is None  # not checked yet
    calibration.held_out = held
    note = calibration.held_out_note()
    assert note and "not to be trusted" in note
    reloaded = cal.Calibration.load(calibration.save(tmp_path / "cal.json"))
    assert reloaded.held_out == held
    comparison = compare.compare_sets(run_set(1), run_set(2), calibration=reloaded)
    assert note in comparison.warnings


# ------------------------------------------------------------ several runs a side (comparison/run_sets.py)


def _runs(seeds: range, start: int, slow: dict[int, dict[str, float]] | None = None,
          scatter: float = 0.08) -> list[ResultSet]:
    """Runs made every other minute from minute ``start`` (base and head alternate when one
    starts at 0 and the other at 1); ``slow`` maps a run's index to its slowed backends."""
    out = []
    for i, seed in enumerate(seeds):
        rs = run_set(seed, load=1.0 + 0.03 * (seed % 3), scatter=scatter, slow=(slow or {}).get(i))
        rs.env["created"] = f"2026-11-26T05:{start + 2 * i:02d}:00+00:00"
        out.append(rs)
    return out


def test_five_alternated_runs_a_side_decide_a_1_5x_slowdown_that_single_runs_cannot() -> None:
    calibration = calibrated(0.08, runs=10)
    slowed = {i: {"zmq": 1.5} for i in range(5)}
    base, head = _runs(range(100, 105), 0), _runs(range(200, 205), 1, slowed)
    single = compare.compare_sets(base[0], head[0], calibration=calibration)
    many = compare.compare_sets(run_sets.merge_runs(base), run_sets.merge_runs(head), calibration=calibration)
    assert _slower_backends(many) == {"zmq"} and len(many.regressions) == len(SIZES) * 2
    assert len(single.regressions) < len(many.regressions)  # the tails of single runs hide some of it
    assert len(many.with_status("faster")) == 0 and many.exit_code == 1
    assert all("spread of 5 base and 5 head runs" in c.noise_source for c in many.cases if c.interval is not None)
    assert any("base holds 5 runs and head 5, made alternately" in w for w in many.warnings)
    # the runs' own spread decides without a calibration too
    bare = compare.compare_sets(run_sets.merge_runs(base), run_sets.merge_runs(head))
    assert _slower_backends(bare) == {"zmq"} and len(bare.with_status("faster")) == 0


def test_identical_code_in_runs_a_side_gives_no_verdict_even_with_one_run_that_jumped() -> None:
    false = 0
    jumped = []
    for rep in range(6):
        # one head run of five in which mpi-p2p ran 3x slower (a second speed, a busy neighbour)
        base = _runs(range(300 + 10 * rep, 305 + 10 * rep), 0)
        head = _runs(range(400 + 10 * rep, 405 + 10 * rep), 1, {rep % 5: {"mpi-p2p": 3.0}})
        comparison = compare.compare_sets(run_sets.merge_runs(base), run_sets.merge_runs(head))
        false += _false(comparison)
        jumped += [c for c in comparison.cases if c.key.split("/")[1] == "mpi-p2p"]
    assert false == 0
    assert all(c.status == "inconclusive" for c in jumped)  # the jump widened them, it did not flag them
    assert all("runs a side" in c.decide or "near the threshold" in c.decide for c in jumped)
    # a run that shared the machine is named
    head[2].env["others_cpu_share"] = 0.14
    comparison = compare.compare_sets(run_sets.merge_runs(base), run_sets.merge_runs(head))
    assert any("head run 3" in w and "14%" in w and "rerun them" in w for w in comparison.warnings)


def test_runs_of_one_side_all_made_before_the_others_are_judged_as_single_runs() -> None:
    calibration = calibrated(0.08, runs=10)
    slowed = {i: {"zmq": 1.5} for i in range(5)}
    base, head = _runs(range(100, 105), 0), _runs(range(200, 205), 20, slowed)  # head 20 minutes later
    comparison = compare.compare_sets(run_sets.merge_runs(base), run_sets.merge_runs(head), calibration=calibration)
    assert any("every run of base was made before every run of head" in w for w in comparison.warnings)
    assert not any("head runs" in (c.noise_source or "") for c in comparison.cases)
    few = compare.compare_sets(run_sets.merge_runs(base[:4]), run_sets.merge_runs(head[:4]), calibration=calibration)
    assert any("needs at least 5 a side" in w for w in few.warnings)
    assert not any("head runs" in (c.noise_source or "") for c in few.cases)


def test_cli_compares_folders_and_globs_of_runs_and_refuses_a_run_given_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slowed = {i: {"zmq": 2.0} for i in range(5)}
    for name, runs in (("base", _runs(range(100, 105), 0)), ("head", _runs(range(200, 205), 1, slowed))):
        for i, rs in enumerate(runs):
            rs.save(tmp_path / name / f"run{i}" / "results.json")
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "head"), "--calibration", "none"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "base holds 5 runs and head 5" in out
    assert main(["compare", str(tmp_path / "base" / "run*"), str(tmp_path / "head" / "run*" / "results.json"),
                 "--calibration", "none"]) == 1
    capsys.readouterr()
    # the same run twice on a side: exit 2, naming both files
    twin = tmp_path / "twice"
    for i in (0, 1):
        (twin / f"r{i}").mkdir(parents=True)
        (twin / f"r{i}" / "results.json").write_text((tmp_path / "base" / "run0" / "results.json").read_text())
    assert main(["compare", str(twin), str(tmp_path / "head"), "--calibration", "none"]) == 2
    err = capsys.readouterr().err
    assert "are the same run" in err and "r0" in err and "r1" in err
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(tmp_path / "head")]) == 2
    assert "holds no results.json" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nothing-*"), str(tmp_path / "head")]) == 2
    assert "nothing matches" in capsys.readouterr().err


def _busy(runs: list[ResultSet], seed: int) -> list[ResultSet]:
    """Other jobs took the CPUs for part of each run: in every case a share of the iterations
    (20-70%, case by case and run by run) ran 1.5-4x slower; the fastest ones were left alone."""
    rng = np.random.default_rng(seed)
    for rs in runs:
        for r in rs.results:
            if r.scenario != "broadcast":  # the in-run references: their own steady copies
                continue
            for m, x in r.samples.items():
                hit = rng.random(len(x)) < rng.uniform(0.2, 0.7)
                r.samples[m] = [v * float(rng.uniform(1.5, 4.0)) if h else v for v, h in zip(x, hit)]
    return runs


def test_runs_a_side_are_judged_by_their_medians_and_by_their_fast_tails() -> None:
    """On a busy machine the medians of 5 runs a side cannot see a 1.5x slowdown, their 10%
    quantiles can: compare judges each case both ways, at half the error rate each."""
    slowed = {i: {"zmq": 1.5} for i in range(5)}
    found: dict[str, int] = {"median": 0, "tail": 0, "either": 0}
    false = 0
    for rep in range(3):
        base = run_sets.merge_runs(_busy(_runs(range(500 + 10 * rep, 505 + 10 * rep), 0, scatter=0.03), seed=rep))
        head = run_sets.merge_runs(_busy(_runs(range(600 + 10 * rep, 605 + 10 * rep), 1, slowed, scatter=0.03),
                                         seed=50 + rep))
        same = run_sets.merge_runs(_busy(_runs(range(700 + 10 * rep, 705 + 10 * rep), 1, scatter=0.03), seed=90 + rep))
        ways = {"median": compare.compare_sets(base, head, quantiles=(0.5,)),
                "tail": compare.compare_sets(base, head, quantiles=(run_sets.RUN_QUANTILE,)),
                "either": compare.compare_sets(base, head)}
        for way, comparison in ways.items():
            found[way] += len(comparison.regressions)
            false += len(comparison.with_status("faster")) + len({c.key.split("/")[1] for c in comparison.regressions} - {"zmq"})
        false += _false(compare.compare_sets(base, same))
    assert false == 0
    # 3 comparisons x 6 zmq cases
    assert found["median"] <= 6 and found["tail"] >= 16 and found["either"] >= 16, found
    either = compare.compare_sets(base, head)
    assert any("by its runs' medians and by their 10% quantiles" in w for w in either.warnings)
    zmq = [c for c in either.cases if c.key.split("/")[1] == "zmq"]
    assert all("runs' 10% quantiles" in (c.noise_source or "") for c in zmq if c.status == "slower")


def test_a_case_whose_medians_and_fast_tails_decide_differently_is_inconclusive() -> None:
    make = lambda status: verdict.CaseVerdict("broadcast/zmq/bytes/ndarray/1000/r4", status, note="n")  # noqa: E731
    assert compare._either(make("slower"), make("faster")).status == "inconclusive"
    assert "medians say slower, their fast tails faster" in compare._either(make("slower"), make("faster")).note
    assert compare._either(make("inconclusive"), make("slower")).status == "slower"
    assert compare._either(make("faster"), make("inconclusive")).status == "faster"
    assert compare._either(make("faster"), make("unchanged")).status == "inconclusive"  # a contradiction too
    assert compare._either(make("inconclusive"), make("unchanged")).status == "unchanged"
    assert compare._either(make("unchanged"), make("inconclusive")).status == "unchanged"
