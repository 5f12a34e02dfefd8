"""A comparison as the JSON verdict file (``ipcbench compare/gate --json FILE``), schema
``pytest-ipcbench-verdicts`` version 1: docs/verdicts-json.md describes every field, and
docs/verdicts.schema.json is its JSON Schema."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.outdir import write_output, write_text
from .verdict import EXIT_OK, STATUS_ORDER, CaseVerdict, Comparison, decide_summary

SCHEMA = "pytest-ipcbench-verdicts"
VERSION = 1


def _num(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _case(c: CaseVerdict) -> dict[str, Any]:
    iv = c.interval
    return {
        "key": c.key, "status": c.status, "looks_slower": c.looks_slower,
        "ratio": _num(iv.ratio) if iv else None, "low": _num(iv.low) if iv else None,
        "high": _num(iv.high) if iv else None, "detectable": _num(c.detectable),
        "noise_source": c.noise_source, "metric": c.metric,
        "base_median_s": _num(iv.median_b) if iv else None, "head_median_s": _num(iv.median_a) if iv else None,
        "counter_words": list(c.explanations), "counter_regressions": list(c.counter_regressions),
        "threshold": c.threshold,
        "waiver": c.waiver.to_json() if c.waiver is not None else None,
        "note": c.note, "decide": c.decide,
    }


def to_json(comparison: Comparison, command: str = "compare", inconclusive_pass: bool = False,
            summary: str | None = None) -> dict[str, Any]:
    """The verdict file's content: ``command`` "compare" or "gate"; ``inconclusive_pass``: the
    exit code of an INCONCLUSIVE outcome is 0 (``--inconclusive pass``)."""
    from .verdict_text import _ordered, verdict_line

    counts = {s: len(comparison.with_status(s)) for s in STATUS_ORDER}
    counts["waived"] = sum(c.waiver is not None for c in comparison.cases)
    exit_code = comparison.exit_code
    if inconclusive_pass and comparison.outcome == "INCONCLUSIVE":
        exit_code = EXIT_OK
    cal = comparison.calibration
    return {
        "schema": SCHEMA, "version": VERSION, "command": command, "outcome": comparison.outcome,
        "exit_code": exit_code, "summary": summary if summary is not None else verdict_line(comparison),
        "threshold": comparison.threshold, "confidence": comparison.confidence,
        "family_wise": comparison.family_wise, "metric": comparison.metric,
        "calibration": ({"path": str(cal.path or ""), "machine": str(cal.env.get("host", ""))}
                        if cal is not None else None),
        "noise": comparison.noise,
        "warnings": list(comparison.warnings), "counts": counts,
        "decide": decide_summary(comparison.undecided),
        "cases": [_case(c) for c in _ordered(comparison)],
    }


def write_json(path: str | Path, comparison: Comparison, command: str = "compare",
               inconclusive_pass: bool = False, checked: bool = True) -> Path:
    """Write the verdict file whole or not at all: a user-named one checked as every output is
    (core/outdir.py), the gate's own report file (``checked=False``) written in its folder."""
    text = json.dumps(to_json(comparison, command, inconclusive_pass), indent=1) + "\n"
    return write_output(path, text, "--json") if checked else write_text(Path(path), text, "--json")
