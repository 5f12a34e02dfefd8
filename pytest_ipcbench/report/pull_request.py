"""A pull request's comment and a CI job's summary, rendered from a verdicts file.

The verdicts file is what ``ipcbench compare/gate --json FILE`` writes (docs/verdicts-json.md); the
markdown puts first what decides a merge. ``ipcbench comment`` posts it; a job summary is the same text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.units import format_ratio, format_time

#: The hidden first line that finds this tool's one comment among a pull request's comments.
MARKER = "<!-- pytest-ipcbench -->"
SCHEMA = "pytest-ipcbench-verdicts"
VERSIONS = (1,)
OUTCOMES = ("REGRESSION", "OK", "INCONCLUSIVE")
#: rows per table: a comment holds at most 65,536 characters; the rest is counted, not listed
MAX_ROWS = 40


def load_verdicts(path: str | Path) -> dict[str, Any]:
    """A verdicts file, checked for what the rendering needs; UsageError naming the problem."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{p}: no such verdicts file (written by `ipcbench gate/compare --json FILE`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read the verdicts file: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"{p}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{p}: not a verdicts file (expected \"schema\": \"{SCHEMA}\")")
    if data.get("version") not in VERSIONS:
        raise UsageError(f"{p}: verdicts version {data.get('version')!r}; this pytest-ipcbench reads {VERSIONS}")
    if data.get("outcome") not in OUTCOMES:
        raise UsageError(f"{p}: outcome {data.get('outcome')!r} is not one of {', '.join(OUTCOMES)}")
    cases = data.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, dict) and isinstance(c.get("key"), str)
                                              and isinstance(c.get("status"), str) for c in cases):
        raise UsageError(f"{p}: \"cases\" must be a list of objects with a \"key\" and a \"status\"")
    return data


def _cell(text: Any) -> str:
    """Text for a table cell: one line, no column breaks, no HTML (a fork's file is not trusted)."""
    s = " ".join(str(text).split())
    return s.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _ratio(case: dict[str, Any]) -> str:
    return format_ratio(_num(case.get("ratio")))


def _interval(case: dict[str, Any]) -> str:
    low, high = _num(case.get("low")), _num(case.get("high"))
    return f"{low:.2f}-{high:.2f}x" if low is not None and high is not None else "-"


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _times(case: dict[str, Any]) -> str:
    base, head = _num(case.get("base_median_s")), _num(case.get("head_median_s"))
    return f"{format_time(base)} → {format_time(head)}" if base is not None or head is not None else "-"


def _table(header: list[str], rows: list[list[str]], what: str) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        out.append(f"\n… and {len(rows) - MAX_ROWS} more {what} (the full list is in the report)")
    return out


def _regressions(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Not waived, and slower or with an exact counter that grew (the cases that fail the gate)."""
    return [c for c in cases if not c.get("waiver") and (c["status"] == "slower" or c.get("counter_regressions"))]


def render(verdicts: dict[str, Any], run_url: str | None = None, artifact: str | None = None) -> str:
    """The comment's markdown (starts with :data:`MARKER`)."""
    cases: list[dict[str, Any]] = verdicts["cases"]
    outcome = verdicts["outcome"]
    title = {"REGRESSION": "❌ REGRESSION", "INCONCLUSIVE": "⚠️ INCONCLUSIVE", "OK": "✅ OK"}[outcome]
    command = verdicts.get("command", "gate")
    out = [MARKER, f"### pytest-ipcbench {command}: {title}", "", _cell(verdicts.get("summary", "")), ""]

    slower = sorted(_regressions(cases), key=lambda c: -(_num(c.get("ratio")) or 0))
    if slower:
        out += [f"#### Regressions ({len(slower)})", ""]
        out += _table(["case", "head / base", "interval", "base → head", "counters"],
                      [[c["key"], _ratio(c), _interval(c), _times(c),
                        "; ".join(c.get("counter_words") or []) or "-"] for c in slower], "regressions")
        out.append("")

    undecided = [c for c in cases if c["status"] == "inconclusive" and not c.get("waiver")]
    if undecided:
        undecided.sort(key=lambda c: (not c.get("looks_slower"), -(_num(c.get("ratio")) or 0)))
        out += [f"#### Inconclusive ({len(undecided)})", ""]
        out += _table(["case", "head / base", "interval", "detects", "what would decide it"],
                      [[c["key"] + (" (looks slower)" if c.get("looks_slower") else ""), _ratio(c), _interval(c),
                        format_ratio(_num(c.get("detectable"))), c.get("decide") or verdicts.get("decide") or "-"]
                       for c in undecided], "inconclusive cases")
        if verdicts.get("decide"):
            out += ["", f"What would decide them: {_cell(verdicts['decide'])}"]
        out.append("")

    waived = [c for c in cases if c.get("waiver")]
    if waived:
        out += [f"#### Waived ({len(waived)})", ""]
        out += _table(["case", "status", "head / base", "reason", "expires"],
                      [[c["key"], c["status"], _ratio(c), (c["waiver"] or {}).get("reason", "-"),
                        (c["waiver"] or {}).get("expires", "-")] for c in waived], "waived cases")
        out.append("")

    counts = verdicts.get("counts") or {}
    listed = ", ".join(f"{n} {s}" for s, n in counts.items() if n and s != "waived")
    if listed:
        out += [f"All cases: {listed}.", ""]
    faster = [c for c in cases if c["status"] == "faster" and not c.get("waiver")]
    if faster:
        out += [f"<details><summary>Faster ({len(faster)})</summary>", ""]
        out += _table(["case", "head / base", "interval"], [[c["key"], _ratio(c), _interval(c)] for c in faster],
                      "faster cases")
        out += ["", "</details>", ""]

    calibration = verdicts.get("calibration")
    calib = (f"calibration {_cell(calibration.get('path', '?'))} ({_cell(calibration.get('machine', '?'))})"
             if isinstance(calibration, dict) else "no calibration")
    out.append(f"**Noise:** {_cell(verdicts.get('noise') or '-')}; {calib}.")
    for warning in verdicts.get("warnings") or []:
        out.append(f"- ⚠️ {_cell(warning)}")
    threshold, confidence = _num(verdicts.get("threshold")), _num(verdicts.get("confidence"))
    rule = []
    if threshold is not None:
        rule.append(f"slower means above +{threshold * 100:g}%")
    if confidence is not None:
        rule.append(f"{confidence * 100:g}%" + (" family-wise" if verdicts.get("family_wise") else "") + " confidence")
    if verdicts.get("metric"):
        rule.append(f"metric {_cell(verdicts['metric'])}")
    link = ""
    if run_url:
        link = f" Report: [the run]({run_url})" + (f", artifact `{_cell(artifact)}`" if artifact else "") + "."
    out += ["", f"<sub>{'; '.join(rule)}.{link}</sub>" if rule or link else ""]
    return "\n".join(out).rstrip() + "\n"
