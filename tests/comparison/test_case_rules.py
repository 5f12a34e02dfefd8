"""Per-case thresholds and waivers of ``[tool.ipcbench]`` (core/case_rules.py) in compare's verdicts."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest
from test_compare_runs import calibrated, run_set  # tests/comparison is on sys.path (rootdir conftest, no package)

from pytest_ipcbench.commands import main
from pytest_ipcbench.core.case_rules import CaseRules, RuleError, Waiver, parse_rules
from pytest_ipcbench.core.project import read_config


def test_thresholds_first_match_and_waivers_parsed() -> None:
    rules = parse_rules({"thresholds": {"broadcast/shm/*": 0.25, "broadcast/*": "15%"},
                         "waivers": [{"case": "*/zmq/*", "reason": "known", "expires": date(2999, 1, 1)},
                                     {"case": "pingpong/*", "reason": "r", "expires": "2999-02-03"}]}, "here")
    assert rules.threshold_for("broadcast/shm/bytes/ndarray/1000/r2", 0.1) == 0.25
    assert rules.threshold_for("broadcast/zmq/bytes/ndarray/1000/r2", 0.1) == pytest.approx(0.15)
    assert rules.threshold_for("stream/zmq/bytes/buffer/1000/r2", 0.1) == 0.1
    assert rules.waiver_for("stream/zmq/x") == Waiver("*/zmq/*", "known", date(2999, 1, 1))
    assert rules.waiver_for("pingpong/shm").expires == date(2999, 2, 3)  # type: ignore[union-attr]
    assert rules.waiver_for("broadcast/shm/x") is None
    rules.check_expiry()


BAD = [
    ({"thresholds": {"x/*": -0.1}}, "out of range"),
    ({"thresholds": {"x/*": "ten"}}, "is not a number"),
    ({"thresholds": {"x/*": True}}, "is not a number"),
    ({"thresholds": {"x/*": "１０%"}}, "is not a number"),  # full-width digits: not what anyone typed
    ({"thresholds": {"x/[ab": 0.2}}, "unclosed '['"),
    ({"thresholds": {"": 0.2}}, "non-empty"),
    ({"thresholds": [1]}, "must be a table"),
    ({"waivers": {"case": "x"}}, "array of tables"),
    ({"waivers": [{"case": "x", "reason": "r"}]}, "missing expires"),
    ({"waivers": [{"case": "x", "reason": "r", "expires": "2026-13-01"}]}, "is not a date"),
    ({"waivers": [{"case": "x", "reason": "r", "expires": "31/12/2026"}]}, "is not a date"),
    ({"waivers": [{"case": "x", "reason": " ", "expires": "2026-12-01"}]}, "reason must say why"),
    ({"waivers": [{"case": "x", "reason": "r", "expires": "2026-12-01", "until": 1}]}, "unknown key"),
]


@pytest.mark.parametrize("table,message", BAD, ids=[m for _t, m in BAD])
def test_bad_rules_are_named(table: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        parse_rules(table, "pyproject.toml")
    toml = tmp_path / "pyproject.toml"  # read with the matrix: the same error, naming the file
    if "thresholds" in table and isinstance(table["thresholds"], dict):
        key, value = next(iter(table["thresholds"].items()))
        toml.write_text(f'[tool.ipcbench]\nranks = 2\n[tool.ipcbench.thresholds]\n"{key}" = {value!r}\n'
                        .replace("True", "true").replace("'", '"'))
        with pytest.raises(RuleError, match=re.escape(str(toml))):
            read_config(toml)


def test_an_expired_waiver_is_an_error_naming_it() -> None:
    rules = CaseRules(waivers=(Waiver("a/*", "old", date(2020, 1, 1)), Waiver("b/*", "new", date(2999, 1, 1))),
                      source="pyproject.toml [tool.ipcbench]")
    with pytest.raises(RuleError, match=r"expired waiver\(s\): case = 'a/\*' \(expired 2020-01-01: old\)"):
        rules.check_expiry()
    rules.check_expiry(date(2019, 12, 31))
    rules.check_expiry(date(2020, 1, 1))  # through its day


PYPROJECT = """[project]
name = "consumer"
[tool.ipcbench]
ranks = 2
{extra}
"""


def _files(tmp_path: Path) -> tuple[str, str, str]:
    b = run_set(1).save(tmp_path / "b.json")
    h = run_set(2, load=1.3, scatter=0.05, slow={"zmq": 2.0}).save(tmp_path / "h.json")
    cal = calibrated(0.05).save(tmp_path / "cal.json")
    return str(b), str(h), str(cal)


def test_compare_honours_a_case_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    b, h, cal = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", b, h, "--calibration", cal]) == 1  # zmq 2x slower
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(extra='[tool.ipcbench.thresholds]\n"*/zmq/*" = 3.0'))
    capsys.readouterr()
    assert main(["compare", b, h, "--calibration", cal]) != 1
    out = capsys.readouterr().out
    assert "threshold ±300% ([tool.ipcbench.thresholds])" in out and "REGRESSION" not in out


def test_compare_lists_waived_cases_and_refuses_an_expired_waiver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    b, h, cal = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    waiver = '[[tool.ipcbench.waivers]]\ncase = "broadcast/zmq/*"\nreason = "zmq 4.3.5 copies frames"\nexpires = {}'
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(extra=waiver.format("2999-12-31")))
    assert main(["compare", b, h, "--calibration", cal]) in (0, 3)  # never 1: OK, or INCONCLUSIVE for the others
    out = capsys.readouterr().out
    assert "waived: broadcast/zmq/bytes/ndarray/" in out and "(slower, 2." in out
    assert "waived until 2999-12-31 (broadcast/zmq/*): zmq 4.3.5 copies frames" in out
    last = out.splitlines()[-1]
    assert "REGRESSION" not in last and " waived: broadcast/zmq/" in last
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(extra=waiver.format("2021-06-30")))
    assert main(["compare", b, h, "--calibration", cal]) == 2
    err = capsys.readouterr().err
    assert "expired waiver(s): case = 'broadcast/zmq/*' (expired 2021-06-30" in err and "pyproject.toml" in err
