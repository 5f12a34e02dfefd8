"""``ipcbench compare`` / ``gate``: verdicts on synthetic result sets, exit codes, and bad input.

The end-to-end gate (two installs, interleaved runs) is ``test_gate_end_to_end``: it needs a commit
with ``ipcbench run`` and takes minutes, so it runs only with ``IPCBENCH_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_ipcbench.commands import compare as compare_command, main
from pytest_ipcbench.comparison import compare, rounds, verdict_text
from pytest_ipcbench.comparison.calibration import Calibration, CaseNoise
from pytest_ipcbench.core import names
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.core.procs import BUSY_SHARE
from pytest_ipcbench.gate import gate, gate_sides
from pytest_ipcbench.results import stats
from pytest_ipcbench.results.results import Result, ResultSet

BACKENDS = ("lmdb", "shm", "zmq", "mpi-bcast", "mpi-pkl5", "mpi-buffer", "mpi-p2p", "mp-queue")
KINDS = ("dict", "ndarray")
SIZES = (1_000, 1_000_000)
SAMPLES = 30
SPREAD = 0.05  # relative dispersion of the samples of one case, as on a quiet machine


def make_set(seed: int = 0, factors: dict[str, float] | None = None, spread: float = SPREAD,
             n: int = SAMPLES) -> ResultSet:
    """Every backend x kind x size x ranks; sample times ~ lognormal around a per-case median."""
    rng = np.random.default_rng(seed)
    factors = factors or {}
    rs = ResultSet(env={"host": "test", "python": "3", "gate_job": "synthetic"})  # one paired experiment
    for backend in BACKENDS:
        for kind in KINDS:
            for size in SIZES:
                for ranks in (2, 4):
                    median = 2e-6 * size ** 0.8 * (1 + 0.3 * ranks) * (1 + BACKENDS.index(backend) / 4)
                    r = Result("bcast", backend, "bytes", kind, size, ranks, {}, nbytes=size)
                    f = factors.get(r.key, factors.get("*", 1.0))
                    r.samples["completion"] = list(median * f * rng.lognormal(0.0, spread, n))
                    r.samples["write"] = list(0.4 * median * rng.lognormal(0.0, spread, n))
                    rs.add(r)
    return rs


def save(rs: ResultSet, path: Path) -> str:
    rs.save(path)
    return str(path)


@pytest.fixture
def base_file(tmp_path: Path) -> str:
    return save(make_set(seed=1), tmp_path / "base.json")


# ------------------------------------------------------------------------------ the three proofs


def test_same_set_is_unchanged(base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", base_file, base_file]) == 0
    out = capsys.readouterr().out
    n = len(make_set().results)
    assert f"{n} unchanged" in out
    assert out.strip().splitlines()[-1] == "OK: every case decided, none slower than +10% with 95% family-wise confidence"
    assert "slower" not in out.split("notes", 1)[1].split("\n\n")[0]  # no row says slower


def test_one_case_50_percent_slower_fails_and_is_named(
    tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = "bcast/shm/bytes/ndarray/1000000/r4"
    head = save(make_set(seed=2, factors={victim: 1.5}), tmp_path / "head.json")
    md = tmp_path / "summary.md"
    assert main(["compare", base_file, head, "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert f"REGRESSION: 1 case(s) slower than +10% with 95% family-wise confidence: {victim}" in out
    row = next(line for line in out.splitlines() if line.startswith(victim))
    assert "slower" in row and "1.5" in row  # ratio ~1.5x printed
    text = md.read_text()
    assert victim in text and "**slower**" in text and ":x:" in text


def test_every_median_moved_by_noise_up_to_10_percent_passes(
    tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(7)
    keys = [r.key for r in make_set().results]
    factors = {k: float(rng.uniform(0.9, 1.1)) for k in keys}
    head = save(make_set(seed=3, factors=factors), tmp_path / "head.json")
    code = main(["compare", base_file, head])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # no regression; the cases whose noise cannot tell leave it INCONCLUSIVE (exit 3), never OK
    assert (code, last.split(":")[0]) in ((0, "OK"), (3, "INCONCLUSIVE")), last


@pytest.mark.parametrize("seed", range(5))
def test_noise_never_fails_over_several_draws(seed: int) -> None:
    """The same proof on several independent draws: a gate that flaps on noise is useless."""
    rng = np.random.default_rng(100 + seed)
    base = make_set(seed=200 + seed)
    factors = {r.key: float(rng.uniform(0.9, 1.1)) for r in base.results}
    head = make_set(seed=300 + seed, factors=factors)
    comparison = compare.compare_sets(base, head)
    assert comparison.outcome != "REGRESSION" and comparison.exit_code in (0, 3), verdict_text.format_table(comparison)


def test_twenty_percent_slowdown_everywhere_is_caught() -> None:
    comparison = compare.compare_sets(make_set(seed=1), make_set(seed=2, factors={"*": 1.2}))
    assert comparison.exit_code == 1
    assert len(comparison.regressions) == len(comparison.cases)


def test_faster_is_reported_and_passes() -> None:
    victim = "bcast/zmq/bytes/dict/1000/r2"
    comparison = compare.compare_sets(make_set(seed=1), make_set(seed=2, factors={victim: 0.5}))
    assert comparison.exit_code == 0
    assert [c.key for c in comparison.with_status("faster")] == [victim]


# ---------------------------------------------------------------------- cases, metrics, options


def test_added_and_removed_cases_are_listed_not_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, head = make_set(seed=1), make_set(seed=2)
    gone = base.results[0].key
    head.results = [r for r in head.results if r.key != gone]
    head.add(Result("bcast", "new-backend", "bytes", "tiny", 64, 2, {"completion": [1e-6] * 5}))
    b, h = save(base, tmp_path / "b.json"), save(head, tmp_path / "h.json")
    assert main(["compare", b, h]) == 0
    out = capsys.readouterr().out
    assert "1 added" in out and "1 removed" in out
    assert any(line.startswith(gone) and "removed" in line for line in out.splitlines())
    assert any(line.startswith("bcast/new-backend") and "added" in line for line in out.splitlines())


def test_metric_option_compares_another_metric(tmp_path: Path) -> None:
    base = make_set(seed=1)
    head = make_set(seed=2)
    for r in head.results:
        r.samples["write"] = [x * 2 for x in r.samples["write"]]
    b, h = save(base, tmp_path / "b.json"), save(head, tmp_path / "h.json")
    assert main(["compare", b, h]) == 0
    assert main(["compare", b, h, "--metric", "write"]) == 1


def test_family_wise_is_stricter_than_per_case() -> None:
    """A case at the edge: per case it passes as slower, over 64 cases the evidence is not enough."""
    base = make_set(seed=1, n=8)
    head = make_set(seed=2, n=8, factors={"bcast/zmq/bytes/ndarray/1000/r2": 1.16})
    per_case = compare.compare_sets(base, head, family_wise=False)
    family = compare.compare_sets(base, head)
    assert family.per_case_confidence > 0.999 and per_case.per_case_confidence == 0.95
    assert len(family.regressions) <= len(per_case.regressions)
    edge = [c for c in family.cases if c.key == "bcast/zmq/bytes/ndarray/1000/r2"][0]
    edge_pc = [c for c in per_case.cases if c.key == edge.key][0]
    assert edge.interval and edge_pc.interval and edge.interval.low < edge_pc.interval.low


def test_threshold_and_confidence_change_the_decision() -> None:
    victim = "bcast/lmdb/bytes/dict/1000000/r2"
    base, head = make_set(seed=1), make_set(seed=2, factors={victim: 1.25})
    assert compare.compare_sets(base, head, threshold=0.10).exit_code == 1
    assert compare.compare_sets(base, head, threshold=0.40).exit_code == 0


def test_too_few_samples_give_no_verdict() -> None:
    base, head = make_set(seed=1, n=2), make_set(seed=2, n=2, factors={"*": 3.0})
    with pytest.raises(ValueError, match="nothing to compare"):
        compare.compare_sets(base, head)
    base.add(Result("x", "shm", "bytes", "tiny", 64, 2, {"completion": [1.0, 1.1, 0.9]}))
    head.add(Result("x", "shm", "bytes", "tiny", 64, 2, {"completion": [1.0, 1.1, 0.9]}))
    comparison = compare.compare_sets(base, head)
    assert comparison.exit_code == 3  # undecided cases: INCONCLUSIVE, never OK
    assert all("too few samples" in c.note for c in comparison.with_status("inconclusive") if c.interval is None)


def test_merge_rounds_pools_samples_per_metric() -> None:
    a, b = make_set(seed=1, n=4), make_set(seed=2, n=5)
    merged = rounds.merge_rounds([a, b])
    assert len(merged.results) == len(a.results)
    first = merged.by_key()[a.results[0].key]
    assert len(first.samples["completion"]) == 9 and len(first.samples["write"]) == 9
    assert first.extra[rounds.ROUNDS_KEY] == {"completion": [4, 5], "write": [4, 5]}
    assert merged.env["gate_rounds"] == 2
    assert len(a.results[0].samples["completion"]) == 4  # inputs untouched


def test_round_order_alternates() -> None:
    assert gate.round_order(3) == [(0, "base"), (0, "head"), (1, "head"), (1, "base"), (2, "base"), (2, "head")]
    assert gate.round_order(1, first=3) == [(3, "head"), (3, "base")]  # confirmation rounds go on


def _rounds(seed: int, swings: list[float], factor: float = 1.0, n: int = 40) -> list[ResultSet]:
    """One result set per round; every sample of round i is scaled by the machine's swing i."""
    sets = []
    for i, swing in enumerate(swings):
        rs = make_set(seed=seed * 100 + i, factors={"*": factor * swing}, n=n)
        sets.append(rs)
    return sets


def test_merged_rounds_are_compared_round_by_round() -> None:
    """A runner that swings by 20-35% between rounds: pooled samples would cry wolf, rounds do not."""
    base = rounds.merge_rounds(_rounds(1, [1.0, 1.0, 1.0]))
    head = rounds.merge_rounds(_rounds(2, [1.35, 1.2, 1.0]))  # same code, a busy machine in 2 rounds
    pooled = compare.compare_sets(_strip_rounds(base), _strip_rounds(head))
    assert pooled.exit_code == 1  # the naive interval is far too narrow
    by_round = compare.compare_sets(base, head)
    assert by_round.exit_code == 3, verdict_text.format_table(by_round)


def _victim_rounds(swings_b: list[float], swings_h: list[float], victim: str,
                   factor: float) -> tuple[ResultSet, ResultSet]:
    base = rounds.merge_rounds(_rounds(1, swings_b))
    head_sets = _rounds(2, swings_h)
    for rs in head_sets:
        for r in rs.results:
            if r.key == victim:
                r.samples["completion"] = [x * factor for x in r.samples["completion"]]
    return base, rounds.merge_rounds(head_sets)


def test_slowdown_is_caught_through_round_to_round_swings() -> None:
    """The machine swings by 25% from round to round, both sides alike within a round (they ran
    side by side): three paired rounds, each case's variance moderated by its group's, see 1.5x."""
    victim = "bcast/mpi-pkl5/bytes/dict/1000000/r4"
    swings = [1.0, 0.8, 1.25]
    base, head = _victim_rounds(swings, swings, victim, 1.5)
    alone = compare.compare_sets(base, head)
    assert [c.key for c in alone.regressions] == [victim], verdict_text.format_table(alone)
    assert alone.with_status("faster") == []
    # the same without moderation: its own 2 degrees of freedom at 99.9+% per case cannot decide
    split = rounds.round_split(head.by_key()[victim], "completion")
    chunks = (rounds.chunks(head.by_key()[victim].samples["completion"], split),
              rounds.chunks(base.by_key()[victim].samples["completion"], split))
    from pytest_ipcbench.results.stats import round_ratio_halfwidth
    own = round_ratio_halfwidth(*chunks, alone.per_case_confidence)
    moderated = next(c for c in alone.cases if c.key == victim).noise
    assert own is not None and moderated is not None and own > 3 * moderated


def test_sides_that_swing_apart_between_rounds_stay_undecided() -> None:
    """Each side saw another machine in each round (+-20% apart): the rounds' own spread shows it,
    and neither a calibration that measured less noise nor the group's quieter cases narrow it."""
    victim = "bcast/mpi-pkl5/bytes/dict/1000000/r4"
    base, head = _victim_rounds([1.0, 0.9, 1.1], [1.1, 1.0, 0.9], victim, 1.25)
    calibration = Calibration({r.key: CaseNoise(0.01, 0.01, 12, "bcast r4") for r in base.results}, {}, 12, 0.10,
                              {"host": "test"})
    for comparison in (compare.compare_sets(base, head), compare.compare_sets(base, head, calibration=calibration)):
        assert comparison.regressions == [] and comparison.with_status("faster") == [], \
            verdict_text.format_table(comparison)


def _busy_side(seed: int, k: int, factors: dict[str, float] | None = None) -> ResultSet:
    """``k`` rounds of a machine that other jobs kept busy: in each round, case by case, a share
    of the iterations (20-70%) ran 1.5-4x slower; the fastest ones were left alone."""
    rng = np.random.default_rng(seed)
    sets = []
    for i in range(k):
        rs = make_set(seed=seed * 10 + i, factors=factors)
        for r in rs.results:
            for m, x in r.samples.items():
                hit = rng.random(len(x)) < rng.uniform(0.2, 0.7)
                r.samples[m] = [v * float(rng.uniform(1.5, 4.0)) if h else v for v, h in zip(x, hit)]
        sets.append(rs)
    return rounds.merge_rounds(sets)


def test_a_busy_gates_rounds_are_judged_by_their_medians_and_by_their_fast_tails() -> None:
    """Beside other jobs a round's median moves with how many of its iterations they hit, its 10%
    quantile hardly: the gate judges each case both ways, at half the error rate each."""
    slow = {f"bcast/zmq/bytes/{kind}/{size}/r{ranks}": 1.5 for kind in KINDS for size in SIZES for ranks in (2, 4)}
    found = {"median": 0, "either": 0}
    false = 0
    for rep in range(3):
        base, head, same = _busy_side(100 + rep, 4), _busy_side(200 + rep, 4, slow), _busy_side(300 + rep, 4)
        for way, comparison in (("median", compare.compare_sets(base, head, fast_tail=None)),
                                ("either", compare.compare_sets(base, head))):
            found[way] += sum("/zmq/" in c.key for c in comparison.regressions)
            false += sum("/zmq/" not in c.key for c in comparison.regressions) + len(comparison.with_status("faster"))
        aa = compare.compare_sets(base, same)
        false += len(aa.regressions) + len(aa.with_status("faster"))
    assert false == 0
    assert found["median"] <= 4 and found["either"] >= 20, found  # of 3 x 8 slowed cases
    either = compare.compare_sets(base, head)
    assert any("by its rounds' medians and by their 10% quantiles" in w for w in either.warnings)
    assert any("rounds' 10% quantiles" in c.noise_source for c in either.regressions)
    alone = compare.compare_sets(base, head, fast_tail=None)
    assert not any("quantiles" in w for w in alone.warnings)


def test_rounds_interval_pairs_rounds_and_contains_the_ratio() -> None:
    rng = np.random.default_rng(5)
    a = [list(rng.lognormal(0, 0.05, 30) * 2.0) for _ in range(4)]
    b = [list(rng.lognormal(0, 0.05, 30)) for _ in range(4)]
    iv = stats.rounds_ratio_interval(a, b)
    assert iv.low < iv.ratio < iv.high and 1.8 < iv.ratio < 2.2
    with pytest.raises(ValueError):
        stats.rounds_ratio_interval([[1.0], []], [[1.0]])


def _labelled(rs: ResultSet) -> ResultSet:
    for r in rs.results:
        r.extra["case"] = f"label of {r.key}"
    return rs


def test_only_cases_in_doubt_get_confirming_rounds_those_that_look_slower_first() -> None:
    """After the first rounds, every case whose verdict is not "unchanged" is in doubt (slower
    ones too: a confirmed regression needs the rounds); the confirming rounds select those by their
    case labels: the ones that look slower (or are) first, since they decide the outcome; the others
    once none is left, or when the budget could not decide the first ones."""
    slow, edgy = "bcast/shm/bytes/dict/1000000/r4", "bcast/zmq/bytes/ndarray/1000/r2"
    base = rounds.merge_rounds([_labelled(make_set(seed=s, spread=0.01)) for s in (1, 2)])
    head = rounds.merge_rounds([_labelled(make_set(seed=s, spread=0.01, factors={slow: 2.0, edgy: 1.08}))
                                 for s in (3, 4)])
    comparison = compare.compare_sets(base, head)
    statuses = {c.key: c.status for c in comparison.cases}
    assert statuses[slow] in ("slower", "inconclusive") and statuses[edgy] == "inconclusive"
    assert gate.doubtful(comparison, head) == [f"label of {slow}"]
    no_slow = rounds.merge_rounds([_labelled(make_set(seed=s, spread=0.01, factors={edgy: 1.08})) for s in (3, 4)])
    assert gate.doubtful(compare.compare_sets(base, no_slow), no_slow) == [f"label of {edgy}"]
    assert gate.doubtful(compare.compare_sets(base, base), base) == []


def test_after_one_round_a_side_the_cases_that_look_slower_are_the_ones_measured_again() -> None:
    """A large matrix under load fits one round of every case in the budget; the gate's next
    rounds then measure only the cases in doubt, those that look slower first. One round a side
    decides nothing (how much a round moves is not measured yet), so every case is in doubt; a
    slowed case must be what the next round selects, not the whole matrix and not nothing."""
    slow = "bcast/shm/bytes/dict/1000000/r4"
    base = rounds.merge_rounds([_labelled(make_set(seed=1, spread=0.01))])
    head = rounds.merge_rounds([_labelled(make_set(seed=3, spread=0.01, factors={slow: 2.0}))])
    comparison = compare.compare_sets(base, head, paired=True)
    assert comparison.outcome == "INCONCLUSIVE" and not comparison.with_status("unchanged")
    assert gate.doubtful(comparison, head) == [f"label of {slow}"]


def test_doubtful_extras_run_as_their_block_and_unlabelled_cases_rerun_everything() -> None:
    base, head = make_set(seed=1, spread=0.01), make_set(seed=2, spread=0.01, factors={"*": 1.5})
    comparison = compare.compare_sets(base, head)
    assert gate.doubtful(comparison, head) is None  # a version that does not label its cases
    for rs in (base, head):
        for r in rs.results:
            r.scenario = "mpi-method"
    comparison = compare.compare_sets(base, head)
    assert gate.doubtful(comparison, head) == ["seed004"]


def test_a_round_killed_by_the_gate_leaves_nothing_in_dev_shm(tmp_path: Path) -> None:
    """A round the gate ends (its timeout, or the gate interrupted) is killed with its whole group;
    a segment one of its processes made (a transport's, made before the ranks started) is removed
    once that process is gone, and nothing of another process is touched."""
    keep = Path("/dev/shm") / names.resource_name("other")  # ours, alive: never removed
    keep.touch()
    made = tmp_path / "made"
    code = ("import os, pathlib, sys, time; from pytest_ipcbench.core import names; "
            "p = pathlib.Path('/dev/shm') / names.resource_name('seg'); p.touch(); "
            "pathlib.Path(sys.argv[1]).write_text(str(p)); time.sleep(600)")
    try:
        assert gate_sides._run_logged([sys.executable, "-c", code, made], tmp_path / "log", timeout=15) == -1
        assert made.is_file() and not Path(made.read_text()).exists()
        assert keep.exists()
    finally:
        keep.unlink(missing_ok=True)


def test_side_args_follow_what_the_side_knows(tmp_path: Path) -> None:
    new = gate.Side("head", "head", None, run_help="  --only PATTERN\n  --results-only  ...")
    old = gate.Side("base", "base", "abc", run_help="  --only PATTERN\n")
    assert gate.side_args(new, ["--quick"], None, tmp_path, 10) == ["--quick", "--results-only"]
    assert gate.side_args(old, ["--quick"], ["a b", "seed004"], tmp_path, 10) == \
        ["--quick", "--only", "a b", "--only", "seed004"]
    # --count: passed to a side that knows it (its cases then get counter verdicts), not to one that does not
    counting = gate.Side("head", "head", None, run_help="  --results-only\n  --count  count what each message costs")
    assert gate.side_args(counting, ["--quick"], None, tmp_path, 10, count=True) == \
        ["--quick", "--results-only", "--count"]
    assert gate.side_args(counting, ["--quick", "--count"], None, tmp_path, 10, count=True) == \
        ["--quick", "--count", "--results-only"]
    assert gate.side_args(old, ["--quick"], None, tmp_path, 10, count=True) == ["--quick"]
    # a round that does not count says so to a side that counts by default (every round after a side's first)
    both = gate.Side("head", "head", None, run_help="  --results-only\n  --count  the default\n  --no-count  no pass")
    assert gate.side_args(both, ["--quick"], None, tmp_path, 10, count=False) == ["--quick", "--results-only", "--no-count"]
    assert gate.side_args(both, ["--quick"], None, tmp_path, 10, count=True) == ["--quick", "--results-only", "--count"]
    assert gate.side_args(counting, ["--quick"], None, tmp_path, 10, count=False) == ["--quick", "--results-only"]


def _strip_rounds(rs: ResultSet) -> ResultSet:
    """The rounds pooled, as one paired run of many samples (no round counts left)."""
    out = ResultSet(env={k: v for k, v in rs.env.items() if k != "gate_rounds"})
    for r in rs.results:
        out.add(Result.from_dict({**r.to_dict(), "extra": {}}))
    return out


@pytest.mark.parametrize(
    ("text", "value"), [("0.1", 0.1), ("10%", 0.1), ("0", 0.0), ("2.5%", 0.025)]
)
def test_parse_threshold(text: str, value: float) -> None:
    assert compare_command.DECISION[0].checked(text, "--threshold") == pytest.approx(value)


@pytest.mark.parametrize("text", ["-0.1", "abc", "nan", "12"])
def test_bad_threshold_is_a_usage_error(text: str, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", base_file, base_file, "--threshold", text])
    assert exc.value.code == 2
    assert "threshold" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["1", "0", "95", "x"])
def test_bad_confidence_is_a_usage_error(text: str, base_file: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", base_file, base_file, "--confidence", text])
    assert exc.value.code == 2


# ---------------------------------------------------------------------------------- bad files


def test_missing_file_exits_2(tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", base_file, str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert "head" in err and "no results file" in err and "nope.json" in err


def test_not_json_exits_2(tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    assert main(["compare", str(bad), base_file]) == 2
    err = capsys.readouterr().err
    assert "base" in err and "not a results JSON file" in err


def test_wrong_schema_exits_2(tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": []}))  # e.g. a pytest-benchmark file
    assert main(["compare", base_file, str(other)]) == 2
    assert "not a pytest-ipcbench results file" in capsys.readouterr().err


def test_malformed_records_exit_2(tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"schema": "pytest-ipcbench/1", "results": [{"backend": "shm"}]}))
    assert main(["compare", base_file, str(broken)]) == 2
    assert "malformed" in capsys.readouterr().err


def test_nothing_in_common_exits_2(tmp_path: Path, base_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    other = ResultSet(env={"gate_job": "synthetic"},
                      results=[Result("x", "shm", "bytes", "tiny", 64, 2, {"completion": [1e-6] * 5})])
    assert main(["compare", base_file, save(other, tmp_path / "o.json")]) == 2
    assert "nothing to compare" in capsys.readouterr().err


def test_zero_times_are_reported_not_crashed(tmp_path: Path) -> None:
    base, head = make_set(seed=1), make_set(seed=2)
    head.results[0].samples["completion"] = [0.0] * SAMPLES
    base.results[0].samples["completion"] = [0.0] * SAMPLES
    comparison = compare.compare_sets(base, head)
    assert comparison.with_status("inconclusive")[0].key == base.results[0].key


def test_environment_difference_is_warned() -> None:
    base, head = make_set(seed=1), make_set(seed=2)
    head.env["host"] = "another-runner"
    comparison = compare.compare_sets(base, head)
    assert any("host" in w for w in comparison.warnings)
    assert "warning: base and head differ in host" in verdict_text.format_table(comparison)


# ------------------------------------------------------------------------------ gate, no runs


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A pytest-ipcbench repository whose first commit predates ``ipcbench run``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "pyproject.toml").write_text("[project]\nname = 'pytest-ipcbench'\nversion = '0'\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "old")
    return repo


def test_gate_base_without_ipcbench_run_exits_2(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tiny_repo)
    assert main(["gate", "--base", "HEAD", "--cache-dir", str(tiny_repo.parent / "cache")]) == 2
    err = capsys.readouterr().err
    assert "base HEAD" in err and "has no `ipcbench run`" in err and "predates the harness" in err


def test_gate_unknown_ref_exits_2(tiny_repo: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tiny_repo)
    assert main(["gate", "--base", "no-such-branch", "--cache-dir", str(tiny_repo.parent / "cache")]) == 2
    assert "cannot resolve 'no-such-branch'" in capsys.readouterr().err


def test_gate_outside_a_repository_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert main(["gate", "--base", "HEAD"]) == 2
    assert "not inside a git repository" in capsys.readouterr().err


# -------------------------------------------------------------------------------- end to end

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.environ.get("IPCBENCH_SLOW_TESTS") != "1", reason="slow: set IPCBENCH_SLOW_TESTS=1")
@pytest.mark.timeout(1800)
def test_gate_end_to_end(tmp_path: Path) -> None:
    """``ipcbench gate`` on this repository: HEAD installed as base, the working tree as head.

    Proves the mechanics (worktree, two installs, interleaved runs, merged files, report,
    clean-up); the verdicts themselves are proven on synthetic sets above. Two backends and two
    rounds keep it to a few minutes.
    """
    if not (REPO / ".git").exists() or not (REPO / gate_sides.RUN_MODULE).is_file():
        pytest.skip("needs a git checkout of the project with pytest_ipcbench/main_job.py")
    proc = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"HEAD:{gate_sides.RUN_MODULE}"])
    if proc.returncode != 0:
        pytest.skip("HEAD has no committed `ipcbench run` yet")
    report = tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipcbench", "gate", "--base", "HEAD", "--rounds", "2", "--confirm-rounds", "0",
         "--run-args", "--quick --backends shm,mpi-bcast --scenarios broadcast --no-extras",
         "--cache-dir", str(tmp_path / "cache"), "--out", str(report)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=1700,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 3), out[-4000:]  # 1 or 3 would be a (noisy) verdict, never a crash
    verdicts = json.loads((report / "verdicts.json").read_text())
    assert verdicts["command"] == "gate" and verdicts["exit_code"] == proc.returncode
    assert proc.stdout.strip().splitlines()[-1] == verdicts["summary"]
    assert "2 interleaved rounds" in proc.stdout and "head / base median time" in proc.stdout
    for name in ("base.json", "head.json", "compare.md", "compare.txt", "gate.log"):
        assert (report / name).is_file(), name
    assert sorted(p.name for p in (report / "rounds").iterdir()) == ["1-base", "1-head", "2-base", "2-head"]
    merged = ResultSet.load(report / "head.json")
    assert merged.results and all(r.extra[rounds.ROUNDS_KEY] for r in merged.results)
    assert not [w for w in _git(REPO, "worktree", "list").splitlines()[1:] if "gate-" in w]
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


@pytest.mark.skipif(in_mpi_job(), reason="runs mpiexec itself: not inside an MPI job")
@pytest.mark.timeout(1200)
@pytest.mark.alone  # other jobs on the cores leave its few rounds undecided (exit 3), with no busy share to skip on
def test_gate_catches_an_injected_slowdown_and_confirms_only_cases_in_doubt(tmp_path: Path) -> None:
    """``ipcbench gate --inject shm=3`` of the working tree against HEAD: exit 1 naming shm's cases
    and no zmq case; the confirming rounds run the cases in doubt only (shm's among them).

    Three rounds a side and up to four confirming ones: with 2 + 2, the rounds of a quiet 2-core
    machine's shm ping-pong moved enough to leave the 3x cases undecided (exit 3)."""
    if not (REPO / ".git").exists():
        pytest.skip("needs a git checkout of the project")
    proc = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "HEAD:pytest_ipcbench/harness/inject.py"])
    if proc.returncode != 0:
        pytest.skip("HEAD predates injected slowdowns")
    report = tmp_path / "report"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IPCBENCH_INJECT")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ipcbench", "gate", "--base", "HEAD", "--rounds", "3", "--confirm-rounds", "4",
         "--inject", "shm=3", "--budget", "15",  # minutes: under load the installs alone took 6 of the default 7
         "--run-args", "--quick --ranks 2 --backends shm,zmq --scenarios pingpong --no-extras --no-config",
         "--cache-dir", str(tmp_path / "cache"), "--out", str(report)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=1100,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode == 0 and (report / "rounds").is_dir():
        # 4 rounds cannot decide a 3x slowdown while other jobs take the cores (a second suite
        # beside this one: noise of ±2000%); each round records the CPU share the others took
        busy = sorted(p.name for p in (report / "rounds").iterdir() if (p / "results.json").is_file()
                      and (ResultSet.load(p / "results.json").env.get("others_cpu_share") or 0) > BUSY_SHARE)
        if busy:
            pytest.skip(f"the gate could not decide: other processes took over {BUSY_SHARE:.0%} of the CPUs "
                        f"in rounds {', '.join(busy)}")
    assert proc.returncode == 1, out[-4000:]
    assert "head slowed on purpose (shm=3)" in proc.stdout
    verdict = compare.compare_sets(ResultSet.load(report / "base.json"), ResultSet.load(report / "head.json"),
                                   paired=True)
    slower = [c.key for c in verdict.regressions]
    assert slower and all(key.split("/")[1] == "shm" for key in slower), verdict_text.format_table(verdict)
    assert all(key in (report / "compare.txt").read_text() for key in slower)
    by_round = {p.name: ResultSet.load(p / "results.json") for p in (report / "rounds").iterdir()}
    assert {f"{n}-{side}" for n in (1, 2, 3, 4) for side in ("base", "head")} <= set(by_round)
    # round 4 ran exactly the cases in doubt after rounds 1-3 (shm's among them), on both sides
    base13 = rounds.merge_rounds([by_round[f"{n}-base"] for n in (1, 2, 3)])
    head13 = rounds.merge_rounds([by_round[f"{n}-head"] for n in (1, 2, 3)])
    after13 = compare.compare_sets(base13, head13, paired=True)
    labels = {r.key: r.extra.get("case") for r in head13.results}
    in_doubt = {labels[c.key] for c in after13.cases if c.interval is not None and c.status in gate.IN_DOUBT}
    shm = {r.extra["case"] for r in by_round["1-base"].results if r.backend == "shm"}
    ran = [{r.extra["case"] for r in by_round[side].results if r.extra.get("case")} for side in ("4-base", "4-head")]
    assert ran[0] == ran[1] and ran[0] <= in_doubt  # those that look slower first, as the budget allows
    assert shm & ran[0]  # (not every one: on a machine shared with another test run, a 3x case once measured 1.0x)
    # counted once a side: each side's first round only, and the merged sides carry its counters
    assert all(r.counters is not None for r in by_round["1-head"].results if r.backend == "shm")
    assert all(r.counters is None for name in by_round if not name.startswith("1-") for r in by_round[name].results)
    assert all(r.counters is not None for r in ResultSet.load(report / "head.json").results if r.backend == "shm")
    assert ResultSet.load(report / "head.json").env.get("injected") == "shm=3"
    assert "injected" not in ResultSet.load(report / "base.json").env
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


def test_load_imbalance_between_the_sides_is_warned() -> None:
    def at(load: float) -> ResultSet:
        return ResultSet(env={"load_start": load, "load_end": load})

    assert gate.load_imbalance([at(10), at(11)], [at(18), at(19)]) is not None
    assert gate.load_imbalance([at(10), at(11)], [at(11), at(10)]) is None
    assert gate.load_imbalance([ResultSet(env={})], [at(3)]) is None


def test_one_round_per_side_gives_no_time_verdict_without_a_calibration() -> None:
    """One round per side cannot show how much a round moves: identical code looked 5x faster in
    such a gate. Its cases are inconclusive ("looks slower"), unless a calibration gives the noise."""
    victim = "bcast/mpi-pkl5/bytes/dict/1000000/r4"
    base, head = _victim_rounds([1.0], [1.0], victim, 6.0)
    one = compare.compare_sets(base, head)
    assert one.regressions == [] and one.exit_code == 3, verdict_text.format_table(one)
    case = next(c for c in one.cases if c.key == victim)
    assert case.status == "inconclusive" and "looks slower" in case.note, case
    assert any("ran one round on a side" in w for w in one.warnings)
    calibration = Calibration({r.key: CaseNoise(0.05, 0.06, 12, "bcast r4") for r in base.results}, {}, 12, 0.10,
                              {"host": "test"})
    decided = compare.compare_sets(base, head, calibration=calibration)
    assert [c.key for c in decided.regressions] == [victim], verdict_text.format_table(decided)
    two = compare.compare_sets(*_victim_rounds([1.0, 1.0], [1.0, 1.0], victim, 3.0))  # rounds measure it
    assert [c.key for c in two.regressions] == [victim], verdict_text.format_table(two)


def test_the_budget_notice_predicts_the_gates_double_judgement() -> None:
    # each case is judged twice by a gate (its rounds' medians, their fast tails), each at half the error
    # rate: a case whose noise 32 rounds would decide at the full rate must be named as needing more
    key = "broadcast/fifo/bytes/ndarray/1000/r4"
    sigma = 0.8375  # 1.5x: 28 rounds at z = 1.96 (one judgement), 37 at z = 2.24 (two)
    calibration = Calibration({key: CaseNoise(sigma, sigma, 10, "broadcast r4")}, {"broadcast r4": sigma}, 10, 0.10)
    opts = gate.GateOptions(base="main")
    assert opts.rounds + opts.confirm_rounds == 32
    notice = gate.budget_notice(calibration, opts)
    assert len(notice) == 1 and "1 of 1 calibrated cases cannot decide a 1.5x slowdown" in notice[0], notice
    assert f"{key} (detects" in notice[0] and "needs 37 rounds" in notice[0], notice
    easy = Calibration({key: CaseNoise(0.5, 0.5, 10, "broadcast r4")}, {"broadcast r4": 0.5}, 10, 0.10)
    assert gate.budget_notice(easy, opts) == ["every calibrated case can decide a 1.5x slowdown within 32 rounds per side"]
