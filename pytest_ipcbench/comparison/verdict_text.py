"""A comparison as text: the terminal table and the markdown of a pull request's summary."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.units import format_ratio, format_time
from .calibration_store import describe_use
from .counters import regression_line
from .verdict import STATUS_ORDER, CaseVerdict, Comparison, _pct, decide_summary


def _rules_note(case: CaseVerdict, default: float | None) -> str:
    """A case's own threshold and its waiver ([tool.ipcbench], core/case_rules.py), for its notes."""
    own = f"; threshold ±{case.threshold:.0%} ([tool.ipcbench.thresholds])" \
        if default is not None and case.threshold != default else ""
    w = case.waiver
    return own + (f"; {w.describe()}" if w is not None else "")


def waived_lines(comparison: Comparison) -> list[str]:
    """Every waived case, its status, its waiver's reason and date: a waiver is never silent."""
    return [f"waived: {c.key} ({c.status}{'' if c.interval is None else f', {c.interval.ratio:.3f}x'}"
            f"{', counters grew' if c.counter_regressions else ''}), {c.waiver.describe()}"
            for c in comparison.cases if c.waiver is not None]


def _row(case: CaseVerdict, default: float | None = None) -> list[str]:
    iv = case.interval
    extra = "".join(f"; {e}" for e in case.explanations) + _rules_note(case, default)
    if iv is None:
        return [case.key, "-", "-", "-", "-", case.status, "-", case.note + extra]
    return [
        case.key,
        format_time(iv.median_b),
        format_time(iv.median_a),
        f"{iv.ratio:.3f}x",
        f"{iv.low:.3f}-{iv.high:.3f}",
        case.status,
        _detect_text(case.detectable),
        f"n={case.n_base}/{case.n_head}" + (f" {case.note}" if case.note else "") + extra,
    ]


def _ordered(comparison: Comparison) -> list[CaseVerdict]:
    """Slower cases first, then the undecided ones that look slower (largest ratio first), then the rest."""
    rank = {s: i + 2 for i, s in enumerate(STATUS_ORDER)}

    def order(c: CaseVerdict) -> tuple[int, float, str]:
        first = 0 if c.status == "slower" else 1 if c.status == "inconclusive" and c.looks_slower else rank[c.status]
        return first, -(c.interval.ratio if c.interval is not None and first == 1 else 0.0), c.key

    return sorted(comparison.cases, key=order)


def _keys(cases: Sequence[CaseVerdict], most: int = 5) -> str:
    shown = ", ".join(c.key for c in cases[:most])
    return shown + (f" and {len(cases) - most} more" if len(cases) > most else "")


def verdict_line(comparison: Comparison) -> str:
    """The last line: REGRESSION, OK or INCONCLUSIVE, and why (docs/verdicts-json.md)."""
    pct = round(comparison.threshold * 100, 1)
    conf = f"{round(comparison.confidence * 100, 1):g}%" + (" family-wise" if comparison.family_wise else "")
    undecided = comparison.undecided
    waived = [c for c in comparison.cases if c.waiver is not None]
    tail = f"; {len(waived)} waived: {_keys(waived)}" if waived else ""
    if comparison.outcome == "OK":
        return f"OK: every case decided, none slower than +{pct:g}% with {conf} confidence{tail}"
    looks = [c for c in undecided if c.looks_slower]
    if undecided:
        top = max((c for c in undecided if c.interval is not None), key=lambda c: c.interval.ratio,  # type: ignore
                  default=None)
        largest = f", the largest head/base {top.interval.ratio:.2f}x ({top.key})" if top and top.interval else ""
        slower = f"; {len(looks)} look slower than +{pct:g}%: {_keys(looks)}" if looks else ""
        todo = decide_summary(undecided)
        judged = sum(c.status != "reference" for c in comparison.cases)  # in-run references are never judged
        tail = (f"; {len(undecided)} of {judged} case(s) undecided{largest}{slower}"
                f"{f'; to decide them: {todo}' if todo else ''}") + tail
    if comparison.outcome == "INCONCLUSIVE":
        return f"INCONCLUSIVE: {tail[2:]}"
    parts = []
    if comparison.regressions:
        parts.append(f"{len(comparison.regressions)} case(s) slower than +{pct:g}% with {conf} confidence: "
                     f"{_keys(comparison.regressions, 10)}")
    line = regression_line([(c.key, c.counter_regressions) for c in comparison.costlier])
    if line:
        parts.append(line)
    return "REGRESSION: " + "; ".join(parts) + tail


def _headline(comparison: Comparison) -> str:
    counts = comparison.counts()
    parts = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    changed = [c for c in comparison.cases if c.counter_changes]
    if changed:
        parts += f"; the cost per message changed in {len(changed)} case(s) (counters, see notes)"
    return f"{parts}\n{verdict_line(comparison)}"


def _detect_text(x: float | None) -> str:
    """The smallest detectable slowdown for people: beyond 1000x it only says how hopeless."""
    return ">1000x" if x is not None and x > 1000 else format_ratio(x)


def _ci_label(comparison: Comparison) -> str:
    return f"{_pct(comparison.per_case_confidence or comparison.confidence)} CI"


def _decision_note(comparison: Comparison) -> str:
    pct = round(comparison.threshold * 100, 1)
    rule = (f"a case is slower only when its whole {_ci_label(comparison)} of head / base lies above "
            f"{1 + comparison.threshold:.3g} (+{pct:g}%), faster only when below {1 / (1 + comparison.threshold):.3g}, "
            f"unchanged when within both, else inconclusive; 'detects' is the smallest slowdown the case's "
            f"measured noise lets it call slower")
    if comparison.family_wise:
        rule += (f"; each case at {_pct(comparison.per_case_confidence)} so that all {comparison.compared} "
                 f"together hold at {_pct(comparison.confidence)} (Bonferroni)")
    return rule


def _columns(comparison: Comparison) -> list[str]:
    return ["case", "base median", "head median", "head/base", _ci_label(comparison), "verdict", "detects", "notes"]


def format_table(comparison: Comparison) -> str:
    """Plain-text table of every case, then the counts and the verdict."""
    rows = [_columns(comparison)] + [_row(c, comparison.threshold) for c in _ordered(comparison)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    lines = [line.rstrip() for line in lines]
    lines.insert(1, "-" * max(len(line) for line in lines))
    metric = comparison.metric or "each case's primary metric (completion)"
    intro = f"head / base median time of {metric}; {_decision_note(comparison)}"
    out = [intro, *lines, "", describe_use(comparison.calibration), *(f"warning: {w}" for w in comparison.warnings),
           *waived_lines(comparison), _headline(comparison)]
    return "\n".join(out)


def format_markdown(comparison: Comparison, title: str = "ipcbench performance comparison") -> str:
    """The same as :func:`format_table`, as GitHub markdown (for the job summary)."""
    mark = {"REGRESSION": ":x:", "INCONCLUSIVE": ":warning:", "OK": ":white_check_mark:"}[comparison.outcome]
    head, verdict_line = _headline(comparison).split("\n")
    out = [f"## {title}", "", f"{mark} **{verdict_line}**", "", f"Cases: {head}.", ""]
    out += [f"> {describe_use(comparison.calibration)}", ""]
    out += [f"> warning: {w}" for w in comparison.warnings]
    out += [f"> {line}" for line in waived_lines(comparison)]
    cols = _columns(comparison)
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * 4 + ["---", "---:", "---"]) + "|")
    for case in _ordered(comparison):
        cells = [c.replace("|", "\\|") for c in _row(case, comparison.threshold)]
        if case.status == "slower":
            cells[5] = "**slower**"
        out.append("| " + " | ".join(f"`{cells[0]}`" if i == 0 else c for i, c in enumerate(cells)) + " |")
    note = _decision_note(comparison)
    out += ["", note[0].upper() + note[1:] + " (bootstrap of the ratio of medians).", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------ option parsing


