"""stats.py: summaries, the bootstrap interval of a ratio of medians, verdicts (no timing here)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_ipcbench.comparison.compare import compare_sets, decide
from pytest_ipcbench.results.results import ResultSet
from pytest_ipcbench.results.stats import RatioInterval, ratio_interval, summarize


def test_summarize():
    s = summarize([3.0, 1.0, 2.0, 4.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (4, 2.5, 2.5, 1.0, 4.0)
    assert s.q1 == pytest.approx(1.75) and s.q3 == pytest.approx(3.25) and s.iqr == pytest.approx(1.5)
    assert s.stddev == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert summarize([5.0]).stddev == 0.0
    assert set(s.as_dict()) >= {"median", "iqr", "n"}
    with pytest.raises(ValueError):
        summarize([])


def test_ratio_interval_contains_the_ratio_and_is_reproducible():
    rng = np.random.default_rng(1)
    a = 2.0 + 0.1 * rng.standard_normal(40)
    b = 1.0 + 0.05 * rng.standard_normal(40)
    ri = ratio_interval(a, b)
    assert ri.low <= ri.ratio <= ri.high
    assert ri.ratio == pytest.approx(np.median(a) / np.median(b))
    assert 1.8 < ri.low and ri.high < 2.2
    assert ratio_interval(a, b) == ri  # seeded
    assert "95% CI" in str(ri)


def test_ratio_interval_widens_with_noise_and_narrows_with_samples():
    rng = np.random.default_rng(2)
    quiet = ratio_interval(1 + 0.01 * rng.random(30), 1 + 0.01 * rng.random(30))
    noisy = ratio_interval(1 + rng.random(30), 1 + rng.random(30))
    assert (noisy.high - noisy.low) > (quiet.high - quiet.low)
    few = ratio_interval(1 + rng.random(8), 1 + rng.random(8))
    many = ratio_interval(1 + rng.random(800), 1 + rng.random(800))
    assert (many.high - many.low) < (few.high - few.low)


def test_ratio_interval_rejects_bad_input():
    with pytest.raises(ValueError):
        ratio_interval([], [1.0])
    with pytest.raises(ValueError):
        ratio_interval([1.0], [0.0])
    with pytest.raises(ValueError):
        ratio_interval([1.0], [1.0], confidence=1.5)


def test_the_rule_needs_the_whole_interval_past_the_threshold_to_decide():
    """compare's one rule (history/compare.py decide): slower or faster only when the whole
    interval is past the threshold, unchanged only when it lies within it, else inconclusive."""
    def iv(low: float, high: float) -> RatioInterval:
        return RatioInterval((low + high) / 2, low, high, 0.95, 1.0, 1.0)

    assert decide(iv(1.2, 1.4), 0.1) == "slower"
    assert decide(iv(1.05, 1.4), 0.1) == "inconclusive"  # could be within 10%, or past it
    assert decide(iv(0.7, 0.85), 0.1) == "faster"
    assert decide(iv(0.7, 0.95), 0.1) == "inconclusive"
    assert decide(iv(0.95, 1.05), 0.1) == "unchanged"
    assert decide(iv(1.0, 1.1), 0.1) == "unchanged"  # the boundary itself is within
    with pytest.raises(ValueError, match="threshold must not be negative"):
        compare_sets(ResultSet(env={}, results=[]), ResultSet(env={}, results=[]), threshold=-0.1)


def test_results_of_schema_1_still_load(tmp_path) -> None:
    """A results file of schema 1 (untyped ``extra``) loads into the typed fields."""
    import json

    from pytest_ipcbench.results.results import SCHEMA, ResultSet, Verified

    old = {"schema": "pytest-ipcbench/1", "env": {}, "results": [{
        "scenario": "broadcast", "backend": "shm", "mode": "native", "payload": "ndarray", "size": 1000,
        "ranks": 4, "samples": {"completion": [0.001, 0.002, 0.003]}, "nbytes": 1000,
        "extra": {"kind": "store", "readers": 3, "group": "mpi", "verified": {"checked": 9, "failed": 0},
                  "copy_bandwidth_Bps": 1e7, "efficiency": 0.5, "bandwidth_Bps": 5e6, "root": 0}}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    r = ResultSet.load(path).results[0]
    assert (r.delivery, r.readers, r.group, r.verified) == ("store", 3, "mpi", Verified(9, 0))
    assert r.copy_bandwidth == 1e7 and r.extra == {"root": 0}  # derived values are recomputed, not kept
    assert r.bandwidth() == 1000 / 0.002 and r.efficiency() == 1000 / 0.002 / 1e7
    again = ResultSet.load(ResultSet(results=[r]).save(tmp_path / "new.json"))
    assert again.results[0] == r and json.loads((tmp_path / "new.json").read_text())["schema"] == SCHEMA


def test_t_quantile_matches_the_tables():
    from pytest_ipcbench.results.stats import t_quantile

    for p, dof, exact in ((0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 10, 2.228),
                          (0.995, 30, 2.750)):
        assert abs(t_quantile(p, dof) - exact) < 0.002 * exact


def test_round_halfwidth_is_wide_for_few_rounds_and_none_for_one():
    from pytest_ipcbench.results.stats import round_ratio_halfwidth

    rng = np.random.default_rng(3)
    rounds = [[list(rng.lognormal(0, 0.05, 20) * s) for s in swings] for swings in ([1.0, 1.2], [1.1, 0.9])]
    two = round_ratio_halfwidth(rounds[0], rounds[1], 0.95)
    assert two is not None and two > 0.5  # 2 rounds that disagree by 30%: t with 1 dof
    assert round_ratio_halfwidth(rounds[0][:1], rounds[1][:1], 0.95) is None


def test_the_bootstrap_of_a_huge_side_draws_one_value_per_resample_not_every_sample() -> None:
    """350,000 samples a case: drawing every sample of every resample made compare run past 10 minutes."""
    import numpy as np

    from pytest_ipcbench.results import stats

    class Counting:
        def __init__(self) -> None:
            self.rng, self.drawn = np.random.default_rng(0), 0

        def integers(self, low, high, size):
            self.drawn += int(np.prod(size))
            return self.rng.integers(low, high, size)

        def beta(self, a, b, size):
            self.drawn += int(size)
            return self.rng.beta(a, b, size)

    x = np.linspace(1.0, 2.0, 350_000)
    rng = Counting()
    medians = stats._bootstrap_medians(x, 2000, rng)  # type: ignore[arg-type]
    assert rng.drawn == 2000 and medians.shape == (2000,)
    assert abs(float(np.median(medians)) - 1.5) < 0.01
    small = Counting()
    stats._bootstrap_medians(np.linspace(1.0, 2.0, 100), 2000, small)  # type: ignore[arg-type]
    assert small.drawn == 2000 * 100  # small sides as before: the verdicts of every file ever made stand


def test_results_and_calibrations_written_before_the_renames_still_load(tmp_path) -> None:
    """Files of before 0.2 say ``kind`` for a backend's delivery and name the shared-array
    experiment's scenarios ``seed002`` / ``seed002-handle``: they load under today's names, so a
    compare of an old run against a new one matches its cases, and an old calibration its groups."""
    import json

    from pytest_ipcbench.comparison.calibration import SCHEMA as CALIBRATION, Calibration
    from pytest_ipcbench.results.results import SCHEMA, ResultSet

    record = {"backend": "pool", "mode": "native", "payload": "ndarray", "size": 1000, "ranks": 2,
              "samples": {"completion": [0.001, 0.002, 0.003]}, "nbytes": 1000, "kind": "channel"}
    old = {"schema": SCHEMA, "env": {}, "results": [{**record, "scenario": "seed002-handle"},
                                                     {**record, "scenario": "broadcast", "kind": "store"}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    handle, bcast = ResultSet.load(path).results
    assert (handle.scenario, handle.delivery) == ("shared-array-handle", "channel")
    assert handle.key == "shared-array-handle/pool/native/ndarray/1000/r2" and bcast.delivery == "store"
    saved = json.loads(ResultSet(results=[handle]).save(tmp_path / "new.json").read_text())["results"][0]
    assert saved["delivery"] == "channel" and "kind" not in saved
    case = {"sigma": 0.1, "upper": 0.2, "runs": 3, "group": "seed002-handle r2"}
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"schema": CALIBRATION, "runs": 3, "threshold": 0.1, "env": {},
                               "groups": {"seed002-handle r2": 0.1},
                               "cases": {"seed002-handle/pool/native/ndarray/1000/r2": case}}))
    loaded = Calibration.load(cal)
    assert set(loaded.groups) == {"shared-array-handle r2"}
    assert loaded.cases[handle.key].group == "shared-array-handle r2"
