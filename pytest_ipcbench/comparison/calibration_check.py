"""A calibration file checked on read: a file nobody checked must never decide a verdict.

A calibration sets each case's between-run noise, so a planted or damaged one can turn identical
code into "slower" (noise 0) or hide every regression (noise 1e9). Every field is checked for its
type and range before :class:`~.calibration.Calibration` is built, and the first problem is a
:class:`CalibrationError` (exit 2) naming the file and the field: noise finite and > 0, counts
whole and within range, ratios finite and > 0, at most :data:`MAX_CASES` cases, the file at most
:data:`MAX_BYTES` (read without blocking on a FIFO, :func:`~.validation.read_regular_file`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..results.validation import MalformedResults, describe_value, read_regular_file

#: A calibration of this repository's whole matrix at 50 runs is about 2 MB; 64 MiB is far past any.
MAX_BYTES = 64 * 2**20
MAX_CASES = 100_000
MAX_RUNS = 100_000
#: A log-scale noise (sd) above this (a factor of e^30 between two runs) says nothing a verdict can use.
MAX_SIGMA = 30.0


class CalibrationError(UsageError):
    """A calibration file that cannot be used (exit 2): the message names the file and the field."""


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _whole(x: Any, lo: int, hi: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


def _noise(x: Any) -> bool:
    return _num(x) and 0 < x <= MAX_SIGMA


def read_json(path: str | Path) -> Any:
    """The parsed JSON of a calibration file; CalibrationError when it cannot be one."""
    try:
        data = read_regular_file(Path(path), MAX_BYTES)
    except FileNotFoundError:
        raise CalibrationError(f"calibration file {path} does not exist (make it with `ipcbench calibrate`)") from None
    except MalformedResults as exc:
        raise CalibrationError(f"calibration file {exc}".replace(" as results", " as a calibration")
                               .replace("a results file", "a calibration file")) from None
    try:
        return json.loads(data)
    except RecursionError:
        raise CalibrationError(f"calibration file {path}: JSON nested too deeply") from None
    except ValueError as exc:
        raise CalibrationError(f"calibration file {path} cannot be read: {exc}") from None


def check_calibration(data: Any, path: str | Path, schema: str) -> None:
    """Every field of a parsed calibration file, or CalibrationError naming the first bad one."""
    def bad(field: str, value: Any, want: str) -> CalibrationError:
        return CalibrationError(f"calibration file {path}: field {field} is {describe_value(value)}; expected {want} "
                                f"(a hostile or damaged file is never used: remake it with `ipcbench calibrate`)")

    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise CalibrationError(f"{path} is not a calibration file (schema {got!r}, expected {schema!r})")
    for name in ("cases", "groups", "runs", "threshold"):
        if name not in data:
            raise CalibrationError(f"calibration file {path}: field {name!r} is missing")
    if not _whole(data["runs"], 3, MAX_RUNS):
        raise bad("'runs'", data["runs"], f"a whole number of A/A runs from 3 to {MAX_RUNS}")
    if not (_num(data["threshold"]) and 0 <= data["threshold"] < 10):
        raise bad("'threshold'", data["threshold"], "a number from 0 to 10")
    if "env" in data and not isinstance(data["env"], dict):
        raise bad("'env'", data["env"], "an object")
    cases, groups = data["cases"], data["groups"]
    if not isinstance(cases, dict) or not cases:
        raise bad("'cases'", cases, "a non-empty object of case key -> noise")
    if len(cases) > MAX_CASES:
        raise bad("'cases'", f"{len(cases)} cases", f"at most {MAX_CASES}")
    if not isinstance(groups, dict):
        raise bad("'groups'", groups, "an object of group -> noise")
    for g, s in groups.items():
        if not _noise(s):
            raise bad(f"groups[{g!r}]", s, f"a finite noise > 0 and <= {MAX_SIGMA:g} (log-scale sd)")
    for key, c in cases.items():
        where = f"cases[{key!r}]"
        if not isinstance(c, dict):
            raise bad(where, c, "an object with sigma, upper, runs, group")
        for name in ("sigma", "upper"):
            if not _noise(c.get(name)):
                raise bad(f"{where}.{name}", c.get(name), f"a finite noise > 0 and <= {MAX_SIGMA:g} (log-scale sd)")
        if c["upper"] < c["sigma"]:
            raise bad(f"{where}.upper", c["upper"], f"at least its sigma ({c['sigma']!r})")
        if not _whole(c.get("runs"), 3, MAX_RUNS):
            raise bad(f"{where}.runs", c.get("runs"), f"a whole number from 3 to {MAX_RUNS}")
        if not isinstance(c.get("group"), str):
            raise bad(f"{where}.group", c.get("group"), "a group name (a string)")
        ratios = c.get("ratios", [])
        if not isinstance(ratios, list) or len(ratios) > MAX_RUNS:
            raise bad(f"{where}.ratios", ratios, "a list of head / base ratios")
        for i, r in enumerate(ratios):
            if not (_num(r) and r > 0):
                raise bad(f"{where}.ratios[{i}]", r, "a finite ratio > 0")
    held = data.get("held_out") or {}
    if not isinstance(held, dict):
        raise bad("'held_out'", held, "an object of group -> [false, pairs, promised]")
    for g, v in held.items():
        ok = (isinstance(v, list) and len(v) in (2, 3) and _whole(v[0], 0, 2**62) and _whole(v[1], 0, 2**62)
              and v[0] <= v[1] and (len(v) == 2 or (_num(v[2]) and v[2] >= 0)))
        if not ok:
            raise bad(f"held_out[{g!r}]", v, "[false verdicts, pairs, promised]: whole numbers >= 0, false <= pairs")
