"""``ipcbench calibrate``: the between-run noise of identical code, per case, and what it predicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_compare_runs import run_set  # tests/comparison is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.commands import main
from pytest_ipcbench.comparison import calibration as cal, calibration_summary as tell, compare
from pytest_ipcbench.results.results import ResultSet


def test_sigma_of_a_case_is_what_its_runs_scatter() -> None:
    runs = [run_set(100 + i, load=1.0 + 0.2 * (i % 2), scatter=0.2) for i in range(12)]
    c = cal.calibrate_sets(runs, 0.10)
    sigmas = [x.sigma for x in c.cases.values()]
    # two runs of a case scattering by 0.2 (sd, log) each differ by 0.2 * sqrt(2)
    assert np.median(sigmas) == pytest.approx(0.2 * math.sqrt(2), rel=0.25)
    assert all(x.upper >= x.sigma for x in c.cases.values())
    assert not any(k.startswith(("copy/", "reference/")) for k in c.cases)  # references calibrate nothing
    assert set(c.groups) == {"broadcast r2", "broadcast r4"}


def test_a_bimodal_case_gets_its_own_large_noise_not_its_group() -> None:
    runs = [run_set(200 + i, scatter=0.02) for i in range(8)]
    wild = "broadcast/zmq/bytes/ndarray/1000/r4"
    for i, rs in enumerate(runs):
        if i % 3 == 0:
            r = rs.by_key()[wild]
            r.samples["completion"] = [x * 5 for x in r.samples["completion"]]  # 4 ranks on 2 cores
    c = cal.calibrate_sets(runs, 0.10, {"host": "test", "cores": 2})
    assert c.noise(wild)[0] > 0.5
    calm = "broadcast/shm/bytes/ndarray/1000/r4"
    assert c.noise(calm)[0] < 0.1  # one wild case does not widen its group's others
    # a 5x jump of the wild case between two runs is not a regression; a 2x of a calm one is
    base, head = run_set(300, scatter=0.02), run_set(301, scatter=0.02, slow={"shm": 2.0})
    r = head.by_key()[wild]
    r.samples["completion"] = [x * 5 for x in r.samples["completion"]]
    comparison = compare.compare_sets(base, head, calibration=c)
    assert wild not in {x.key for x in comparison.regressions}
    assert {x.key.split("/")[1] for x in comparison.regressions} == {"shm"}


def test_rounds_to_detect_and_detectable_agree() -> None:
    z = 3.0
    k = tell.rounds_to_detect(0.3, 1.5, 0.10, z)
    assert k is not None and tell.detectable(0.3, k, 0.10, z) <= 1.5 < tell.detectable(0.3, k - 1, 0.10, z)
    assert tell.rounds_to_detect(0.3, 1.05, 0.10, z) is None
    assert tell.bare_false_alarm(0.0, 0.1) == 0.0 and 0.3 < tell.bare_false_alarm(0.1, 0.1) < 0.4


def test_normalisation_interval_holds_the_factor() -> None:
    n = cal.reference_factor(run_set(1).by_key(), run_set(2, load=2.0).by_key())
    assert n.used and n.low <= n.factor <= n.high and n.factor == pytest.approx(2.0, rel=0.05)
    assert "median head/base of 6 in-run references" in n.describe()


def test_chi2_quantile_is_close_to_exact() -> None:
    for p, dof, exact in ((0.2, 3, 1.005), (0.2, 10, 6.179), (0.05, 5, 1.145), (0.5, 20, 19.337)):
        assert cal.chi2_quantile(p, dof) == pytest.approx(exact, rel=0.03)


def test_cli_from_files_writes_the_file_and_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(run_set(400 + i, scatter=0.1).save(tmp_path / f"r{i}.json")) for i in range(4)]
    out = tmp_path / "c" / "cal.json"
    assert main(["calibrate", "--from", *files, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "broadcast r2" in text and "rounds for 1.5x" in text and "predicted / observed" in text
    data = json.loads(out.read_text())
    assert data["schema"] == cal.SCHEMA and data["runs"] == 4 and len(data["cases"]) == 48
    loaded = cal.Calibration.load(out)
    assert loaded.noise("broadcast/zmq/bytes/ndarray/1000/r4") is not None
    pytest.importorskip("matplotlib")
    plot = out.with_suffix(".png")  # the plot beside the file, unless --plot says otherwise
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot: {plot}" in text
    assert main(["calibrate", "--from", *files, "--out", str(tmp_path / "d.json"), "--plot", "none"]) == 0
    assert not (tmp_path / "d.png").exists()


def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(run_set(400 + i).save(tmp_path / f"r{i}.json")) for i in range(2)]
    assert main(["calibrate", "--from", *files, "--out", str(tmp_path / "c.json")]) == 2
    assert "at least 3 runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--runs", "2"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["calibrate", "--budget", "-4"])
    (tmp_path / "x.json").write_text("{}")
    assert main(["calibrate", "--from", str(tmp_path / "x.json"), *files, "--out", str(tmp_path / "c.json")]) == 2
    assert not (tmp_path / "c.json").exists()


def test_malformed_calibration_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema": cal.SCHEMA, "runs": 3, "threshold": 0.1, "groups": {},
                                "cases": {"a/b": {"sigma": "x"}}}))
    with pytest.raises(ValueError, match=r"cal.json: field cases\['a/b'\].sigma is \"x\""):
        cal.Calibration.load(path)
    with pytest.raises(ValueError, match="does not exist"):
        cal.Calibration.load(tmp_path / "nope.json")


def test_measure_runs_makes_at_least_three_runs_within_a_budget(tmp_path: Path) -> None:
    sets, loads = tell.measure_runs(["--no-mpi", "--backends", "shm", "--kinds", "buffer", "--scenarios", "pingpong",
                                    "--sizes", "1KB", "--no-extras", "--no-config", "--time-budget", "0.05"],
                                   budget=1.0, scratch=tmp_path)
    assert len(sets) == 3  # the budget of 1 s is spent after the first: still the 3 a calibration needs
    assert all(any(r.backend == "shm" for r in rs.results) for rs in sets)


def test_a_case_that_sat_still_keeps_its_groups_typical_noise() -> None:
    runs = [run_set(600 + i, scatter=0.3) for i in range(6)]
    still = "broadcast/zmq/bytes/ndarray/1000/r2"
    for rs in runs:  # steady in every A/A run: a lucky small estimate
        rs.by_key()[still].samples["completion"] = [1e-4] * 20
    c = cal.calibrate_sets(runs, 0.10, {"host": "test", "cores": 2, "load": [8.0, 10.0]})
    assert c.cases[still].upper < 0.05
    assert c.noise(still)[0] == pytest.approx(c.groups["broadcast r2"]) and c.groups["broadcast r2"] > 0.2
    base, head = run_set(700), run_set(701, load=0.5)  # quieter: a load the calibration never saw
    for rs in (base, head):
        rs.env["load_start"] = rs.env["load_end"] = 1.0
    comparison = compare.compare_sets(base, head, calibration=c)
    assert any("calibration was measured at 8.0-10.0" in w for w in comparison.warnings)


def _slow(rs: ResultSet, key: str, factor: float) -> None:
    r = rs.by_key()[key]
    r.samples["completion"] = [x * factor for x in r.samples["completion"]]


def test_a_jump_its_group_showed_gives_no_false_verdict_and_a_real_3x_slowdown_is_flagged() -> None:
    """Cases steady through several runs ran 2-3x slower in a later one here, and a case's own few
    runs do not show it: its neighbours' do. Two cases of a group each ran 2.5x slower in one A/A
    run; a third, steady through every calibration run, does the same between two later runs: no
    verdict (the per-case noise alone called it slower), nor in the held-out check; 3x is flagged."""
    runs = [run_set(800 + i, scatter=0.02) for i in range(10)]
    victim, others = "broadcast/shm/bytes/ndarray/1000/r4", ("broadcast/zmq/bytes/ndarray/1000/r4",
                                                              "broadcast/lmdb/bytes/ndarray/100000/r4")
    for i, key in ((2, others[0]), (7, others[1])):
        _slow(runs[i], key, 2.5)
    c = cal.calibrate_sets(runs, 0.10, {"host": "test", "cores": 2})
    assert c.tails["broadcast r4"].jump == pytest.approx(math.log(2.5), abs=0.05)
    assert c.noise(victim)[0] < 0.1  # its own runs and its group's median case: steady
    base, head = run_set(900, scatter=0.02), run_set(901, scatter=0.02)
    _slow(head, victim, 2.5)
    comparison = compare.compare_sets(base, head, calibration=c)
    judged = {x.key: x for x in comparison.cases}
    assert judged[victim].status == "inconclusive" and "moved up to 2.5" in judged[victim].note
    assert not comparison.regressions and not comparison.with_status("faster")
    _slow(head, victim, 3.0 / 2.5)
    assert [x.key for x in compare.compare_sets(base, head, calibration=c).regressions] == [victim]
    # the held-out check, the same rule: the victim's one 2.5x run among the calibration's runs
    _slow(runs[5], victim, 2.5)
    held = tell.held_out_false(runs, 0.10, 3.7)
    assert sum(v[1] for v in held.values()) > 0 and sum(v[0] for v in held.values()) == 0, held


def test_an_older_file_loads_its_tails_come_from_its_ratios_and_its_held_out_warns_on_any_false(tmp_path: Path) -> None:
    c = cal.calibrate_sets([run_set(950 + i, scatter=0.1) for i in range(5)], 0.10, {"host": "test", "cores": 2})
    data = c.to_dict()
    data["held_out"] = {"broadcast r2": [1, 100]}  # before the promise was counted: [false, pairs]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = cal.Calibration.load(path)
    assert {g: t.jump for g, t in old.tails.items()} == pytest.approx({g: t.jump for g, t in c.tails.items()}, rel=1e-4)
    assert old.tails["broadcast r2"].pairs == 24 * 4  # the file's ratios: 24 cases x 4 consecutive pairs
    assert old.held_out == {"broadcast r2": [1, 100]} and old.held_out_note() is not None
    old.held_out = {"broadcast r2": [1, 100, 1.2]}  # within what the tail promised: no warning
    assert old.held_out_note() is None
    old.held_out = {"broadcast r2": [2, 100, 1.2], "broadcast r4": [0, 100, 1.2]}
    assert "2 false verdicts in 100 A/A case pairs (identical code) of broadcast r2" in (old.held_out_note() or "")
