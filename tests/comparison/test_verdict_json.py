"""``ipcbench compare --json FILE``: the verdict file validates against docs/verdicts.schema.json,
says what the last line says, and the exit codes follow the outcome (docs/verdicts-json.md)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import jsonschema
import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.comparison import compare, verdict_json
from pytest_ipcbench.core.case_rules import Waiver

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "verdict_corpus"
SCHEMA = json.loads((REPO / "docs" / "verdicts.schema.json").read_text())


def _compare(tmp_path: Path, base: str, head: str, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "v.json"
    code = main(["compare", str(CORPUS / base), str(CORPUS / head), "--json", str(out), *args])
    data = json.loads(out.read_text())
    jsonschema.validate(data, SCHEMA)
    return code, data, data["summary"]


def test_separate_runs_without_a_calibration_are_inconclusive_naming_the_slowed_cases(tmp_path, capsys) -> None:
    code, data, summary = _compare(tmp_path, "runs/A/1/results.json", "runs/S2/1/results.json",
                                   "--calibration", "none")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3 and data["exit_code"] == 3 and data["outcome"] == "INCONCLUSIVE" and last == summary
    assert last.startswith("INCONCLUSIVE: ") and "a calibration (ipcbench calibrate)" in last
    looks = [c["key"] for c in data["cases"] if c["looks_slower"]]
    assert sum(k.split("/")[1] == "shm" for k in looks) >= 4 and looks[0] in last  # shm was slowed 2x
    assert data["cases"][0]["looks_slower"]  # those that look slower come first
    assert data["calibration"] is None and "no calibration" in data["noise"]
    assert data["counts"]["inconclusive"] == sum(c["status"] == "inconclusive" for c in data["cases"])
    code, data, _ = _compare(tmp_path, "runs/A/1/results.json", "runs/S2/1/results.json",
                             "--calibration", "none", "--inconclusive", "pass")
    assert code == 0 and data["exit_code"] == 0 and data["outcome"] == "INCONCLUSIVE"


def test_a_gate_side_that_regressed_says_regression(tmp_path) -> None:
    code, data, summary = _compare(tmp_path, "gates/s2-5/base.json", "gates/s2-5/head.json",
                                   "--calibration", str(CORPUS / "calibration.json"))
    assert code == 1 and data["outcome"] == "REGRESSION" and summary.startswith("REGRESSION: ")
    assert data["command"] == "compare" and data["calibration"]["path"].endswith("calibration.json")
    slower = [c for c in data["cases"] if c["status"] == "slower"]
    assert slower and data["cases"][:len(slower)] == slower
    assert all(c["low"] > 1 + c["threshold"] for c in slower)


def test_a_file_compared_with_itself_is_never_a_regression(tmp_path) -> None:
    """One run against itself: within-run noise only; 15 samples a case cannot decide every case
    at a family-wise 95%, so the outcome is INCONCLUSIVE, never OK over them."""
    code, data, summary = _compare(tmp_path, "runs/A/1/results.json", "runs/A/1/results.json",
                                   "--calibration", "none")
    statuses = {c["status"] for c in data["cases"]}
    assert "slower" not in statuses and "faster" not in statuses and "unchanged" in statuses
    assert (code, data["outcome"]) == (3, "INCONCLUSIVE") and "undecided" in summary


def test_counters_that_grew_are_a_regression_in_words(tmp_path) -> None:
    if not (CORPUS / "counters" / "copy").is_dir():
        pytest.skip("no counted runs in the corpus")
    code, data, summary = _compare(tmp_path, "counters/base/results.json", "counters/copy/results.json",
                                   "--calibration", "none")
    assert code == 1 and "cost more per message" in summary
    grew = [c for c in data["cases"] if c["counter_regressions"]]
    assert grew and all(any("copy" in w for w in c["counter_words"]) for c in grew)


def test_a_waived_case_is_listed_and_never_a_regression() -> None:
    from pytest_ipcbench.comparison.run_sets import load_side

    base, head = load_side(str(CORPUS / "gates/s2-5/base.json"), "b"), load_side(str(CORPUS / "gates/s2-5/head.json"), "h")
    plain = compare.compare_sets(base, head)
    slower = {c.key for c in plain.regressions}
    assert slower
    waiver = Waiver("*/shm/*", "known: the shm path copies twice", date(2099, 1, 1))
    waived = compare.compare_sets(base, head, waivers=lambda key: waiver if key.split("/")[1] == "shm" else None)
    data = verdict_json.to_json(waived, "gate")
    jsonschema.validate(data, SCHEMA)
    assert not waived.regressions and data["outcome"] != "REGRESSION" and data["counts"]["waived"] > 0
    assert all(c["waiver"] == {"reason": waiver.reason, "expires": "2099-01-01"} for c in data["cases"]
               if c["key"] in slower)
    assert "waived" in data["summary"]


def test_a_per_case_threshold_is_honoured() -> None:
    from pytest_ipcbench.comparison.run_sets import load_side

    base, head = load_side(str(CORPUS / "gates/s2-5/base.json"), "b"), load_side(str(CORPUS / "gates/s2-5/head.json"), "h")
    loose = compare.compare_sets(base, head, thresholds=lambda key: 5.0 if key.split("/")[1] == "shm" else 0.10)
    assert not loose.regressions
    assert all(c.threshold == 5.0 for c in loose.cases if c.key.split("/")[1] == "shm" and c.interval is not None)
