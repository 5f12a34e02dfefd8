"""What a comparison answers: the verdict of each case and of the whole (exit codes, decision)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.case_rules import Waiver
from ..core.errors import IpcbenchError
from .calibration import Calibration
from .normalise import Normalisation
from ..results.stats import DEFAULT_CONFIDENCE, RatioInterval

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2

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
    threshold: float = DEFAULT_THRESHOLD  # the slowdown tolerated for this case ([tool.ipcbench.thresholds])
    waiver: Waiver | None = None  # a waiver of [tool.ipcbench]: the status stands, it never makes REGRESSION


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
        """Slower cases that no waiver covers."""
        return [c for c in self.with_status("slower") if c.waiver is None]

    @property
    def waived(self) -> list[CaseVerdict]:
        """Cases a waiver covers (listed in every report, whatever their status)."""
        return [c for c in self.cases if c.waiver is not None]

    @property
    def compared(self) -> int:
        """Cases with an interval (slower, faster, unchanged or inconclusive on the noise)."""
        return sum(c.status in DECIDED or (c.status == "inconclusive" and c.interval is not None) for c in self.cases)

    @property
    def costlier(self) -> list[CaseVerdict]:
        """Cases whose exact counters grew (comparison/counters.py): a regression whatever the times say
        (a waived case is listed, never one)."""
        return [c for c in self.cases if c.counter_regressions and c.waiver is None]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions or self.costlier else EXIT_OK

    def counts(self) -> dict[str, int]:
        return {s: len(self.with_status(s)) for s in STATUS_ORDER}


def _pct(x: float) -> str:
    """0.95 -> '95%', 0.99966 -> '99.97%'."""
    return f"{float(f'{x * 100:.4g}'):g}%"
