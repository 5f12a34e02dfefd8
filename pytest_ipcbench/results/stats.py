"""Statistics of timing samples: summaries, bootstrap intervals of a ratio (the verdict rule is
history/compare.py's).

Times are seconds. A ratio is always ``median(a) / median(b)``; its confidence interval comes
from a percentile bootstrap that resamples ``a`` and ``b`` independently (seeded, so a verdict
is reproducible for the same samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    stddev: float
    min: float
    max: float
    q1: float
    q3: float
    p10: float = float("nan")  # the distribution's tails: a median alone hides a wide spread
    p90: float = float("nan")
    p99: float = float("nan")

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def p50(self) -> float:
        return self.median

    @property
    def spread(self) -> float:
        """p90 / p10: 1 for identical samples; a few x or more is a wide distribution."""
        return self.p90 / self.p10 if self.p10 > 0 else float("inf")

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["iqr"] = self.iqr
        return d


def summarize(samples: Sequence[float]) -> Summary:
    """Median and dispersion of samples (at least one)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    p10, q1, med, q3, p90, p99 = np.percentile(x, [10, 25, 50, 75, 90, 99])
    return Summary(
        n=int(x.size),
        median=float(med),
        mean=float(x.mean()),
        stddev=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min=float(x.min()),
        max=float(x.max()),
        q1=float(q1),
        q3=float(q3),
        p10=float(p10),
        p90=float(p90),
        p99=float(p99),
    )


@dataclass(frozen=True)
class RatioInterval:
    """``median(a) / median(b)`` and its bootstrap confidence interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    median_a: float
    median_b: float

    def __str__(self) -> str:
        pct = round(self.confidence * 100)
        return f"{self.ratio:.3f}x ({pct}% CI {self.low:.3f}-{self.high:.3f})"


def ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> RatioInterval:
    """Bootstrap CI of the ratio of medians ``a / b``."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("a ratio needs samples on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if np.any(xb <= 0) or np.any(xa < 0):
        raise ValueError("times must be positive")
    rng = np.random.default_rng(seed)
    ma = _bootstrap_medians(xa, resamples, rng)
    mb = _bootstrap_medians(xb, resamples, rng)
    ratios = ma / mb
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    med_a, med_b = float(np.median(xa)), float(np.median(xb))
    return RatioInterval(med_a / med_b, float(low), float(high), confidence, med_a, med_b)


#: samples of one side above which its resampled medians are drawn from their exact law (drawing
#: each sample costs resamples x n draws)
EXACT_LAW_FROM = 20_000


def _bootstrap_medians(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Median of each of ``resamples`` resamples of ``x``, drawn in blocks of about 2 M samples:
    the same numbers as one ``(resamples, n)`` draw, in bounded memory (one draw grows with
    ``resamples x n``: a results file may hold 400,000 samples a metric)."""
    if x.size > EXACT_LAW_FROM:  # as the rounds' (_resampled_medians): one draw per resample, not n
        return _resampled_medians([x], np.zeros((resamples, 1), dtype=int), rng)
    block = max(1, (1 << 21) // x.size)
    return np.concatenate([np.median(x[rng.integers(0, x.size, (min(block, resamples - i), x.size))], axis=1)
                           for i in range(0, resamples, block)])


def rounds_ratio_interval(
    a_rounds: Sequence[Sequence[float]],
    b_rounds: Sequence[Sequence[float]],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    quantile: float = 0.5,
) -> RatioInterval:
    """``median(a) / median(b)`` over every round, with a two-level bootstrap interval.

    Samples of one round share the machine's state of that moment (another job on the runner,
    a frequency change), so they are not independent draws: pooling them as if they were gives
    an interval far too narrow, and a gate that flaps. Each resample draws rounds with
    replacement first -- the same round numbers on both sides when both have as many, since
    round i of base and of head ran next to each other -- then samples within each drawn round,
    and every drawn round weighs the same. With few rounds the interval is honest about how
    little a couple of rounds can prove: with 3, a case is slower only if its head lost by more
    than the threshold in practically every round.

    ``quantile``: each round is summarised by this quantile of its samples instead of its median
    (compare's several runs a side and a gate's rounds: :data:`~.run_sets.RUN_QUANTILE`).
    """
    if not a_rounds or not b_rounds or not all(len(r) for r in (*a_rounds, *b_rounds)):
        raise ValueError("a ratio needs samples in every round on both sides")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if any(np.any(np.asarray(r, dtype=float) <= 0) for r in b_rounds) or \
            any(np.any(np.asarray(r, dtype=float) < 0) for r in a_rounds):
        raise ValueError("times must be positive")
    rng = np.random.default_rng(seed)
    paired = len(a_rounds) == len(b_rounds)
    picks_a = rng.integers(0, len(a_rounds), (resamples, len(a_rounds)))
    picks_b = picks_a if paired else rng.integers(0, len(b_rounds), (resamples, len(b_rounds)))
    ma = _resampled_medians(a_rounds, picks_a, rng, quantile)
    mb = _resampled_medians(b_rounds, picks_b, rng, quantile)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ma / mb, [alpha, 1 - alpha])
    # the point estimate is the resamples' statistic on the data itself (the median of the rounds'
    # medians: every round weighs the same), not the pooled median, which weighs a round by its
    # sample count and can fall outside the interval
    med_a = float(np.median([round_statistic(r, quantile) for r in a_rounds]))
    med_b = float(np.median([round_statistic(r, quantile) for r in b_rounds]))
    return RatioInterval(med_a / med_b, float(low), float(high), confidence, med_a, med_b)


def round_statistic(samples: Sequence[float], quantile: float = 0.5) -> float:
    """What one round (or run) of a case is summarised by: its median, or another quantile."""
    return float(np.median(samples)) if quantile == 0.5 else float(np.quantile(samples, quantile))


def _resampled_medians(rounds: Sequence[Sequence[float] | np.ndarray], picks: np.ndarray, rng: np.random.Generator,
                       quantile: float = 0.5) -> np.ndarray:
    """The statistic of each resample: the median, over the drawn rounds, of each drawn round's
    median (or ``quantile``) after resampling that round's samples with replacement.

    A round's resampled median is drawn from its exact law instead of by drawing its samples:
    the m-th smallest of n draws from the round's sorted samples ``x`` is ``x`` at the quantile
    ``U ~ Beta(m, n - m + 1)`` (the m-th smallest of n uniforms; m = (n + 1) * quantile, rounded):
    one draw per round and resample, not n.
    """
    out = np.empty(picks.shape)
    for i, r in enumerate(rounds):
        x = np.sort(np.asarray(r, dtype=float))
        drawn = picks == i
        n = x.size
        m = (n + 1) // 2 if quantile == 0.5 else min(n, max(1, round((n + 1) * quantile)))
        u = rng.beta(m, n - m + 1, int(drawn.sum()))
        out[drawn] = x[np.minimum((u * n).astype(int), n - 1)]
    return np.median(out, axis=1)


def _t_inside(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with whole ``dof``: the finite series of Abramowitz and Stegun
    26.7.3 (odd dof) and 26.7.4 (even)."""
    theta = math.atan(t / math.sqrt(dof))
    c2, odd = math.cos(theta) ** 2, dof % 2
    term = total = 1.0 if dof > 1 else 0.0
    for k in range(2 if odd else 1, dof - 1 if odd else dof - 2, 2):
        term *= c2 * k / (k + 1)
        total += term
    if odd:
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    return math.sin(theta) * total


def t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``dof`` degrees of freedom: the factor
    that turns the standard error of a mean of ``dof + 1`` rounds into an honest interval."""
    if not 0.5 < p < 1 or dof < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and dof >= 1, got p={p}, dof={dof}")
    lo, hi = 0.0, 1.0
    while _t_inside(hi, dof) < 2 * p - 1:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_inside(mid, dof) < 2 * p - 1 else (lo, mid)
    return (lo + hi) / 2


def round_ratio_halfwidth(a_rounds: Sequence[Sequence[float]], b_rounds: Sequence[Sequence[float]],
                          confidence: float, quantile: float = 0.5) -> float | None:
    """Log-scale half-width of a t interval of head / base from the rounds' medians alone.

    Paired when both sides have as many rounds (round i of each ran next to each other): the
    rounds' log ratios have a standard deviation ``s``, and the interval is ``t * s / sqrt(k)``
    with ``k - 1`` degrees of freedom. With 2-4 rounds a bootstrap cannot reach a family-wise
    confidence (its interval never leaves the range of the rounds); this can. None with fewer
    than 2 rounds a side.
    """
    ka, kb = len(a_rounds), len(b_rounds)
    if min(ka, kb) < 2:
        return None
    la = np.log([round_statistic(r, quantile) for r in a_rounds])
    lb = np.log([round_statistic(r, quantile) for r in b_rounds])
    if ka == kb:
        s, k, dof = float(np.std(la - lb, ddof=1)), ka, ka - 1
        se = s / math.sqrt(k)
    else:
        se = math.sqrt(float(np.var(la, ddof=1)) / ka + float(np.var(lb, ddof=1)) / kb)
        dof = min(ka, kb) - 1
    return t_quantile(1 - (1 - confidence) / 2, dof) * se


#: At most this many degrees of freedom are lent to one case by the other cases of its group: a
#: case is never taken to be exactly as noisy as its neighbours, only pulled towards them.
PRIOR_DOF_CAP = 12


def paired_round_log_ratios(a_rounds: Sequence[Sequence[float]],
                            b_rounds: Sequence[Sequence[float]], quantile: float = 0.5) -> np.ndarray | None:
    """log(head / base) of each round's medians (or ``quantile``), when both sides ran the same rounds side by side
    (round i of each next to each other) and there are at least 2; else None."""
    if len(a_rounds) != len(b_rounds) or len(a_rounds) < 2:
        return None
    la = np.log([round_statistic(r, quantile) for r in a_rounds])
    lb = np.log([round_statistic(r, quantile) for r in b_rounds])
    return la - lb


def moderated_halfwidths(log_ratios: dict[str, np.ndarray], groups: dict[str, str], confidence: float,
                         prior_dof_cap: int = PRIOR_DOF_CAP) -> dict[str, float]:
    """Log-scale half-widths of head / base per case from paired rounds, each case's variance
    moderated by its group's (empirical Bayes, as limma's moderated t).

    With 2-6 rounds a case's own round-to-round variance has 1-5 degrees of freedom: a t interval
    at a family-wise confidence is then tens of times wider than the noise (t(1 dof) at 99.95% is
    1273), and no slowdown can be seen. Cases of one group (a scenario and backend at a rank count)
    share how the machine disturbs them, so each case borrows its group's pooled variance ``s0^2``
    with up to ``prior_dof_cap`` degrees of freedom: ``s^2 = (v*s_i^2 + v0*s0^2) / (v + v0)`` with
    ``v + v0`` degrees of freedom. A case noisier than its group keeps its own variance (never
    narrowed by quieter neighbours). A group with fewer than 2 pooled degrees of freedom borrows
    from every case.
    """
    own = {k: (float(np.var(d, ddof=1)), len(d) - 1) for k, d in log_ratios.items() if len(d) >= 2}

    def others(keys: list[str], k: str) -> tuple[float, int]:  # pooled variance of the others
        dof = sum(own[j][1] for j in keys if j != k)
        return (sum(own[j][0] * own[j][1] for j in keys if j != k) / dof, dof) if dof else (0.0, 0)

    by_group: dict[str, list[str]] = {}
    for k in own:
        by_group.setdefault(groups.get(k, ""), []).append(k)
    out: dict[str, float] = {}
    for keys in by_group.values():
        for k in keys:
            s_i, v_i = own[k]
            s0, v0 = others(keys, k)
            if v0 < 2:
                s0, v0 = others(list(own), k)
            prior = min(prior_dof_cap, v0)
            s2 = (v_i * s_i + prior * s0) / (v_i + prior) if prior else s_i
            s2 = max(s2, s_i)
            dof = v_i + prior
            out[k] = t_quantile(1 - (1 - confidence) / 2, dof) * math.sqrt(s2 / (v_i + 1))
    return out


def median_interval(samples: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """A distribution-free interval of the median: the order statistics whose ranks a binomial
    (n, 1/2) puts outside with at most ``1 - confidence`` (exact up to 1000 samples, its normal
    approximation above). With too few samples for that confidence, the smallest and largest."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = int(x.size)
    if n == 0:
        raise ValueError("no samples for an interval")
    tail = (1 - confidence) / 2
    if n <= 1000:
        total, k, below = 2 ** n, 0, 0  # k: how many order statistics each side may be cut
        while True:  # [x[k], x[n-1-k]] covers the median with 1 - 2 P(B <= k)
            below += math.comb(n, k)
            if below > tail * total:
                break
            k += 1
        k -= 1
    else:
        k = int(math.floor(n / 2 - 1 - NormalDist().inv_cdf(1 - tail) * math.sqrt(n) / 2))
    k = min(max(k, 0), (n - 1) // 2)
    return float(x[k]), float(x[n - 1 - k])
