"""What a comparison answers: the verdict of each case and of the whole (exit codes, decision)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..core.case_rules import CaseRules, Waiver
from ..core.errors import IpcbenchError
from ..results.stats import DEFAULT_CONFIDENCE, RatioInterval
from .calibration import Calibration
from .normalise import Normalisation

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
#: Some cases could not be decided: not OK, not a regression (``--inconclusive pass``: exit 0).
EXIT_INCONCLUSIVE = 3
OUTCOME_EXIT = {"REGRESSION": EXIT_REGRESSION, "OK": EXIT_OK, "INCONCLUSIVE": EXIT_INCONCLUSIVE}

DEFAULT_THRESHOLD = 0.10
#: Fewer samples than this on either side: the interval would be a fiction, no verdict is given.
MIN_SAMPLES = 3
#: Verdicts in the order the table lists them; ``reference`` cases measure the machine (copy
#: bandwidth, a raw pipe ping-pong), never the code, and get no verdict.
STATUS_ORDER = ("slower", "faster", "inconclusive", "unchanged", "added", "removed", "reference")
#: Verdicts that decided something about the code.
DECIDED = ("slower", "faster", "unchanged")
#: Log-scale half-widths are capped here (a factor of e^30): wider says nothing more.
MAX_HALF_WIDTH = 30.0
#: Load averages of the two runs further apart than this (and than a quarter of it): warned.
LOAD_GAP = 1.0

@dataclass(frozen=True)
class Decision:
    """How a comparison decides: tolerated slowdown, confidence, metric, family-wise or per case,
    and the calibration file (None: the default path if it exists; "none": no calibration)."""

    threshold: float = DEFAULT_THRESHOLD
    confidence: float = DEFAULT_CONFIDENCE
    metric: str | None = None
    family_wise: bool = True
    markdown: str | None = None  # also write the table as markdown here
    calibration: str | None = None
    json: str | None = None  # also write the verdicts as JSON here (history/verdict_json.py)
    inconclusive_pass: bool = False  # an INCONCLUSIVE outcome exits 0, not 3

    def exit_code(self, comparison: Comparison) -> int:
        """The comparison's exit code, 3 (INCONCLUSIVE) made 0 by ``--inconclusive pass``."""
        code = comparison.exit_code
        return EXIT_OK if code == EXIT_INCONCLUSIVE and self.inconclusive_pass else code


def rule_callables(rules: CaseRules, default: float) -> dict[str, Any]:
    """``compare_sets``' ``thresholds`` and ``waivers`` from ``[tool.ipcbench]``'s (core/case_rules.py)."""
    def waiver(key: str) -> Waiver | None:
        return rules.waiver_for(key)
    return {"thresholds": lambda key: rules.threshold_for(key, default), "waivers": waiver}


class GateError(IpcbenchError):
    """The gate cannot measure or compare (exit 2); the text says why and what to do."""


@dataclass(frozen=True)
class CaseVerdict:
    """One case: its status, the interval of head / base, the noise it saw and what it could detect.

    ``noise``: the log-scale half-width of the interval (what the case's measured spread allows);
    ``detectable``: the smallest true head / base this comparison would call slower;
    ``noise_source``: where the between-run part came from ("within-run", "rounds",
    "calibrated ...", "assumed"); ``explanations``: further lines shown beside the verdict (e.g.
    counter changes).
    """

    key: str
    status: str  # one of STATUS_ORDER
    metric: str = ""
    interval: RatioInterval | None = None
    n_base: int = 0
    n_head: int = 0
    note: str = ""
    noise: float = 0.0
    detectable: float | None = None
    noise_source: str = ""
    explanations: list[str] = field(default_factory=list)
    counter_changes: int | None = None  # counters that changed per message; None: not counted on both sides
    counter_regressions: list[str] = field(default_factory=list)  # exact counters that grew: exit 1
    threshold: float = DEFAULT_THRESHOLD  # this case's tolerated slowdown
    waiver: Waiver | None = None
    decide: str = ""  # what would decide it, when inconclusive
    rounds_needed: int | None = None  # about this many rounds (or runs) a side would decide it

    @property
    def looks_slower(self) -> bool:
        """Its point ratio lies above ``1 + threshold``, decided or not."""
        return self.interval is not None and self.interval.ratio > 1 + self.threshold

    @property
    def undecided(self) -> bool:
        return self.status == "inconclusive" and self.waiver is None


@dataclass
class Comparison:
    cases: list[CaseVerdict]
    threshold: float
    confidence: float
    metric: str | None
    warnings: list[str] = field(default_factory=list)
    per_case_confidence: float = 0.0  # the confidence of each case's interval (family-wise: higher)
    paired: bool = True  # one interleaved experiment (the gate); False: two runs, see ``normalisation``
    normalisation: Normalisation | None = None
    calibration: Calibration | None = None
    noise: str = ""  # one line: how the noise was taken

    def __repr__(self) -> str:  # short: a comparison holds every case's interval
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if n)
        how = "paired" if self.paired else "across runs"
        if self.normalisation is not None and self.normalisation.used:
            how += f", load factor {self.normalisation.factor:.3g}"
        return (f"<Comparison {len(self.cases)} cases ({counts}); threshold {self.threshold:.0%}, "
                f"{_pct(self.confidence)}; {how}; exit {self.exit_code}>")

    @property
    def family_wise(self) -> bool:
        return self.per_case_confidence > self.confidence

    def with_status(self, status: str) -> list[CaseVerdict]:
        return [c for c in self.cases if c.status == status]

    @property
    def regressions(self) -> list[CaseVerdict]:
        """Cases slower with confidence (a waived one is listed, never a regression)."""
        return [c for c in self.with_status("slower") if c.waiver is None]

    @property
    def undecided(self) -> list[CaseVerdict]:
        """Inconclusive cases (not waived), those that look slower first, the largest ratio first."""
        return sorted((c for c in self.cases if c.undecided),
                      key=lambda c: (not c.looks_slower, -(c.interval.ratio if c.interval else 0.0), c.key))

    @property
    def compared(self) -> int:
        """Cases with an interval (slower, faster, unchanged or inconclusive on the noise)."""
        return sum(c.status in DECIDED or (c.status == "inconclusive" and c.interval is not None) for c in self.cases)

    @property
    def costlier(self) -> list[CaseVerdict]:
        """Cases whose exact counters grew (comparison/counters.py): a regression whatever the times say."""
        return [c for c in self.cases if c.counter_regressions and c.waiver is None]

    @property
    def outcome(self) -> str:
        """REGRESSION (a case slower or an exact counter grew), else INCONCLUSIVE (a case could not
        be decided), else OK (every case decided, none slower)."""
        if self.regressions or self.costlier:
            return "REGRESSION"
        return "INCONCLUSIVE" if self.undecided else "OK"

    @property
    def exit_code(self) -> int:
        """1 REGRESSION, 3 INCONCLUSIVE, 0 OK (commands/compare.py: ``--inconclusive pass`` makes 3 a 0)."""
        return OUTCOME_EXIT[self.outcome]

    def counts(self) -> dict[str, int]:
        return {s: len(self.with_status(s)) for s in STATUS_ORDER}


def decide_summary(cases: list[CaseVerdict]) -> str:
    """What would decide these cases, most common first: "a calibration ...; about 12 rounds a side
    (the gate's ...) (3 cases)", a number that differs between cases given as their median."""
    groups: dict[str, list[CaseVerdict]] = {}
    for c in cases:
        if c.decide:
            groups.setdefault(re.sub(r"\d+", "N", c.decide), []).append(c)
    parts = []
    for shape, members in sorted(groups.items(), key=lambda g: -len(g[1]))[:3]:
        numbers = sorted(int(n) for c in members for n in re.findall(r"\d+", c.decide)[:1])
        text = shape.replace("N", str(numbers[len(numbers) // 2]), 1) if numbers else members[0].decide
        parts.append(text if len(groups) == 1 else f"{text} ({len(members)} case(s))")
    return "; ".join(parts)


def _pct(x: float) -> str:
    """0.95 -> '95%', 0.99966 -> '99.97%'."""
    return f"{float(f'{x * 100:.4g}'):g}%"
