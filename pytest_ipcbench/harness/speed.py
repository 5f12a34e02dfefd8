"""Relative speed in tests: "A is at least k times faster than B", decided on a confidence interval.

A ratio measured in the same test, A and B interleaved, survives a change of machine where an
absolute threshold does not. An assertion fails only when the bootstrap interval of the ratio of
medians (:func:`.stats.ratio_interval`) excludes the claim **and** the ratio of the two fastest
samples (:attr:`Comparison.best_ratio`) excludes it too: contention only adds time and can swing
one side's median, while a real slowdown moves the fastest samples as well.

Each assertion takes two callables (measured here, interleaved, ``rounds`` samples each) or two
sets of samples (seconds, :class:`~.results.Result` records, or ``(result, metric)`` pairs)::

    assert_faster(lambda: view(buf), lambda: bytes(buf), at_least=10)
    assert_not_slower(new_impl, old_impl, by_more_than=1.5)
    assert_faster(result_native, result_bytes, at_least=2)      # two harness Results
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import IpcbenchError
from ..core.units import format_time
from ..results.stats import DEFAULT_CONFIDENCE, RatioInterval, ratio_interval

DEFAULT_ROUNDS = 21
MIN_SAMPLE_TIME = 2e-3  # seconds per sample: inner loop long enough for the clock and the noise


class SpeedAssertionError(IpcbenchError, AssertionError):
    """A speed claim that the measurements contradict; ``.comparison`` holds the figures."""

    def __init__(self, message: str, comparison: Comparison) -> None:
        super().__init__(message)
        self.comparison = comparison


@dataclass
class Comparison:
    """Samples of A and B (seconds per call) and the interval of ``median(A) / median(B)``."""

    name_a: str
    name_b: str
    a: list[float]
    b: list[float]
    interval: RatioInterval
    inner: tuple[int, int] = (1, 1)
    interleaved: bool = True
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:  # short: the samples stay in .a and .b
        ia = self.interval
        return (f"<Comparison {self.name_a} / {self.name_b} = {ia.ratio:.3g}x "
                f"({round(ia.confidence * 100)}% CI {ia.low:.3g}-{ia.high:.3g}), {len(self.a)}/{len(self.b)} samples>")

    @property
    def ratio(self) -> float:
        """median(A) / median(B): below 1 means A is faster."""
        return self.interval.ratio

    @property
    def best_ratio(self) -> float:
        """min(A) / min(B): the ratio of what each costs when nothing else got in the way."""
        return min(self.a) / max(min(self.b), 1e-12)

    @property
    def speedup(self) -> float:
        """How many times faster A is than B: median(B) / median(A)."""
        return 1 / self.ratio if self.ratio > 0 else math.inf

    @property
    def speedup_interval(self) -> tuple[float, float]:
        lo, hi = self.interval.low, self.interval.high
        return (1 / hi if hi > 0 else math.inf, 1 / lo if lo > 0 else math.inf)

    def describe(self) -> str:
        ia = self.interval
        pct = round(ia.confidence * 100)
        lo, hi = self.speedup_interval
        how = (f"{len(self.a)} interleaved rounds, inner loops {self.inner[0]} / {self.inner[1]} calls"
               if self.interleaved else f"{len(self.a)} / {len(self.b)} samples")
        return (
            f"median {self.name_a} {format_time(ia.median_a)}, median {self.name_b} {format_time(ia.median_b)}; "
            f"{self.name_a} / {self.name_b} = {ia.ratio:.3g}x ({pct}% CI {ia.low:.3g}x - {ia.high:.3g}x), "
            f"i.e. {self.name_a} is {self.speedup:.3g}x as fast ({pct}% CI {lo:.3g}x - {hi:.3g}x); "
            f"fastest samples {format_time(min(self.a))} / {format_time(min(self.b))} = {self.best_ratio:.3g}x; {how}"
        )


# ------------------------------------------------------------------------------- measuring


Timer = Callable[[], float]


def _time_calls(fn: Callable[[], Any], inner: int, timer: Timer = time.perf_counter) -> float:
    t0 = timer()
    for _ in range(inner):
        fn()
    return (timer() - t0) / inner


def _calibrate(fn: Callable[[], Any], min_time: float, max_inner: int, timer: Timer = time.perf_counter) -> int:
    fn()  # warm-up
    one = max(_time_calls(fn, 1, timer), 1e-9)
    inner = 1
    while inner < max_inner and one * inner < min_time:
        inner = min(max_inner, max(inner * 2, int(min_time / one) + 1))
        one = max(_time_calls(fn, inner, timer), 1e-9)  # re-measure: cheap calls amortise differently
    return inner


def measure_interleaved(
    a: Callable[[], Any],
    b: Callable[[], Any],
    rounds: int = DEFAULT_ROUNDS,
    min_time: float = MIN_SAMPLE_TIME,
    max_inner: int = 100_000,
    timer: Timer = time.perf_counter,
) -> tuple[list[float], list[float], tuple[int, int]]:
    """``rounds`` samples of A and of B, interleaved A B / B A; seconds per call.

    ``timer``: wall time by default (what IPC costs); ``time.process_time`` measures the CPU
    time of this process, which a busy shared machine disturbs far less, for CPU-bound code.
    """
    if rounds < 3:
        raise ValueError(f"rounds must be at least 3 for an interval, got {rounds}")
    inner_a = _calibrate(a, min_time, max_inner, timer)
    inner_b = _calibrate(b, min_time, max_inner, timer)
    sa: list[float] = []
    sb: list[float] = []
    sides = [(sa, a, inner_a), (sb, b, inner_b)]
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for out, fn, inner in sides if r % 2 == 0 else sides[::-1]:
                out.append(_time_calls(fn, inner, timer))
    finally:
        if gc_was:
            gc.enable()
    return sa, sb, (inner_a, inner_b)


def _samples_of(x: Any) -> list[float] | None:
    """Samples from a Result, (Result, metric), or a sequence of numbers; None for a callable."""
    if callable(x) and not hasattr(x, "samples"):
        return None
    if isinstance(x, tuple) and len(x) == 2 and hasattr(x[0], "samples") and isinstance(x[1], str):
        result, metric = x
        return [float(v) for v in result.samples[metric]]
    if hasattr(x, "samples") and hasattr(x, "primary"):
        return [float(v) for v in x.samples[x.primary]]
    try:
        return [float(v) for v in x]
    except TypeError:
        raise TypeError(
            f"expected a callable, a Result, (Result, metric) or a sequence of seconds, got {type(x).__name__}"
        ) from None


def _name_of(x: Any, default: str) -> str:
    if isinstance(x, tuple) and len(x) == 2 and hasattr(x[0], "key"):
        return f"{x[0].backend}/{x[0].mode} {x[1]}"
    if hasattr(x, "key") and hasattr(x, "backend"):
        return f"{x.backend}/{x.mode}"
    name = getattr(x, "__name__", None)
    return default if not name or name == "<lambda>" else name


def compare(
    a: Any,
    b: Any,
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = DEFAULT_CONFIDENCE,
    names: tuple[str, str] | None = None,
    min_time: float = MIN_SAMPLE_TIME,
    timer: Timer = time.perf_counter,
) -> Comparison:
    """Measure (callables) or take (samples) A and B; the ratio median(A) / median(B) and its CI."""
    sa, sb = _samples_of(a), _samples_of(b)
    if (sa is None) != (sb is None):
        raise TypeError("give two callables or two sets of samples, not one of each")
    na, nb = names or (_name_of(a, "A"), _name_of(b, "B"))
    if na == nb:
        na, nb = f"{na} (A)", f"{nb} (B)"
    if sa is None:
        sa, sb, inner = measure_interleaved(a, b, rounds, min_time, timer=timer)
        interleaved = True
    else:
        inner, interleaved = (1, 1), False
    assert sb is not None
    if len(sa) < 3 or len(sb) < 3:
        raise ValueError(f"need at least 3 samples on each side, got {len(sa)} and {len(sb)}")
    interval = ratio_interval(sa, [max(x, 1e-12) for x in sb], confidence=confidence)
    return Comparison(na, nb, list(sa), list(sb), interval, inner, interleaved)


# ------------------------------------------------------------------------------ assertions


def assert_faster(
    fast: Any,
    slow: Any,
    at_least: float = 1.0,
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = DEFAULT_CONFIDENCE,
    names: tuple[str, str] | None = None,
    **measure: Any,
) -> Comparison:
    """Assert ``fast`` is at least ``at_least`` times as fast as ``slow``.

    Fails only if the confidence interval of the speedup lies wholly below ``at_least`` and the
    fastest samples' speedup is below it too.  Leave a margin when A and B may be equal: at
    ``at_least=1.0`` two equal callables sit on the boundary, and a 95% interval excludes it now
    and then.
    ``measure``: ``timer=`` and ``min_time=`` for callables (see :func:`measure_interleaved`).
    """
    if at_least <= 0:
        raise ValueError(f"at_least must be positive, got {at_least}")
    c = compare(fast, slow, rounds=rounds, confidence=confidence, names=names, **measure)
    lo, hi = c.speedup_interval
    if hi < at_least and 1 / c.best_ratio < at_least:
        raise SpeedAssertionError(
            f"{c.name_a} is not {at_least:g}x as fast as {c.name_b}: the whole interval "
            f"{lo:.3g}x - {hi:.3g}x is below {at_least:g}x. {c.describe()}",
            c,
        )
    return c


def assert_slower(slow: Any, fast: Any, at_least: float = 1.0, **kwargs: Any) -> Comparison:
    """Assert ``slow`` takes at least ``at_least`` times as long as ``fast`` (same rule)."""
    return assert_faster(fast, slow, at_least, **kwargs)


def assert_not_slower(
    a: Any,
    b: Any,
    by_more_than: float = 1.0,
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = DEFAULT_CONFIDENCE,
    names: tuple[str, str] | None = None,
    **measure: Any,
) -> Comparison:
    """Assert ``a`` takes at most ``by_more_than`` times as long as ``b``.

    Fails only if the confidence interval of median(a) / median(b) lies wholly above the bound and
    the fastest samples' ratio is above it too.
    ``measure``: ``timer=`` and ``min_time=`` for callables (see :func:`measure_interleaved`).
    """
    if by_more_than <= 0:
        raise ValueError(f"by_more_than must be positive, got {by_more_than}")
    c = compare(a, b, rounds=rounds, confidence=confidence, names=names, **measure)
    if c.interval.low > by_more_than and c.best_ratio > by_more_than:
        raise SpeedAssertionError(
            f"{c.name_a} is more than {by_more_than:g}x as slow as {c.name_b}: the whole interval "
            f"{c.interval.low:.3g}x - {c.interval.high:.3g}x is above {by_more_than:g}x. {c.describe()}",
            c,
        )
    return c


def assert_ratio(
    a: Any,
    b: Any,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    **kwargs: Any,
) -> Comparison:
    """Assert median(a) / median(b) (a time ratio) is within [at_least, at_most], same rule."""
    c = compare(a, b, **kwargs)
    if at_least is not None and c.interval.high < at_least and c.best_ratio < at_least:
        raise SpeedAssertionError(
            f"{c.name_a} / {c.name_b} is below {at_least:g}x with confidence. {c.describe()}", c
        )
    if at_most is not None and c.interval.low > at_most and c.best_ratio > at_most:
        raise SpeedAssertionError(
            f"{c.name_a} / {c.name_b} is above {at_most:g}x with confidence. {c.describe()}", c
        )
    return c


def samples_of(results: Sequence[Any], metric: str | None = None) -> list[float]:
    """All samples of ``metric`` (default: primary) of one or several Results, concatenated."""
    out: list[float] = []
    for r in results:
        out.extend(float(v) for v in r.samples[metric or r.primary])
    return out


__all__ = [
    "Comparison",
    "SpeedAssertionError",
    "assert_faster",
    "assert_not_slower",
    "assert_ratio",
    "assert_slower",
    "compare",
    "measure_interleaved",
    "samples_of",
]
