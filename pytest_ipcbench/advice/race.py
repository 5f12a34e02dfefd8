"""The race: shortlisted (backend, mode) pairs measured interleaved on one object, the slow ones
eliminated by their intervals, the pick confirmed against the runner-up in a fresh run.

Collective: rank 0 decides and broadcasts, so every rank makes the same calls. Each stage is one
:func:`~..harness.measure.bench_interleaved` of the pairs still in (rule 16); rounds accumulate
over stages. After each stage a pair whose rounds' interval of its ratio to the leader
(``results/stats.rounds_ratio_interval``, the gate's) lies above ``1 + tie`` is out. The race
stops when the runner-up is decided against the leader, one pair is left, or the next stage
would not fit the budget. A stage's and the confirmation's rounds shrink (to 2 at least) when the
slowest probe's iteration says they would not fit their share of the budget: an object that takes
half a second a message still gets an answer within the budget, with the wider interval its fewer
rounds give.

The pick is the simplest pair (:func:`simplicity`) within ``tie`` of the leader; its ratio to the
runner-up comes from a fresh run of the two alone (the race's samples favour its winner); should
that find the runner-up faster beyond the tie, they swap. Then, when it fits the budget
(:func:`count_estimate`, :data:`COUNT_SHARE`), the counting pass of the two (harness/count.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..backends.base import BackendSpec, get_backend
from ..core.counters import Counters
from ..core.group import Group
from ..harness.count import COUNT_MESSAGES, COUNT_VOLUME
from ..harness.measure import bench_interleaved
from ..harness.plan import BenchSettings
from ..results.results import Result
from ..results.stats import rounds_ratio_interval

#: what each scenario's pairs are judged by: a broadcast to fully read objects (readers touch
#: every buffer), a ping-pong's one-way latency, a stream's time per delivered message
METRICS = {"broadcast": "completion_touched", "pingpong": "latency", "stream": "delivered"}
#: iterations per round at least: a round's median of one sample is that sample's noise
PER_ROUND = 3
#: share of the budget the race may use; the rest is the confirmation's
RACE_SHARE = 0.7
#: repeats of the counting pass: an exact counter is one both repeats agree on
COUNT_REPEATS = 2
#: the counting pass runs when its estimate fits in what is left of the budget, or in this share of
#: the budget (the reason in counts is worth a call that overruns its budget by that much)
COUNT_SHARE = 0.25
#: how many times a timed message the counting pass's messages take (the allocation pass traces every
#: Python call: a list of 1000 small arrays took minutes at load 20 on 2 cores)
TRACED = 50

#: Third-party packages each built-in backend needs (a user's backend: counted as 1).
_DEPENDENCIES = {"mp-queue": 0, "shm": 0, "lmdb": 1, "zmq": 1}


def simplicity(pair: str) -> tuple[int, int, int, int]:
    """What makes a pair simpler to adopt, fewest first: (an MPI launcher and its processes, third-
    party packages, files it creates (a segment, a folder, a socket), native mode (its own wire
    format) over bytes mode (pickle))."""
    name, _, mode = pair.partition("/")
    try:
        cls = get_backend(name)
        mpi = int(cls.needs_mpi)
        files = 0 if name == "mp-queue" or cls.needs_mpi and not cls.payload_in_shm else 1
    except Exception:
        mpi, files = 0, 1
    deps = 1 if mpi else _DEPENDENCIES.get(name, 1)
    return (mpi, deps, files, int(mode == "native"))


@dataclass(frozen=True)
class RaceOptions:
    scenario: str = "broadcast"
    budget: float = 60.0  # seconds for the race, the confirmation and the counting pass
    rounds: int = 6  # rounds per stage (each pair's iterations spread over them)
    confirm_rounds: int = 8
    tie: float = 0.05
    confidence: float = 0.95
    count: bool = True  # the counting pass for the pick and the runner-up
    iteration_s: float = 0.0  # the slowest shortlisted pair's probe: seconds of one iteration (0: unknown)

    @property
    def metric(self) -> str:
        return METRICS[self.scenario]


@dataclass
class Standing:
    """One pair in the race (rank 0's record)."""

    pair: str
    rounds: list[list[float]] = field(default_factory=list)
    out_at_stage: int | None = None  # eliminated after this stage
    ratio: float | None = None  # its median / the leader's, at the end
    low: float | None = None
    high: float | None = None
    counters: Counters | None = None
    counting: str = ""  # why there are no counters

    @property
    def median(self) -> float:
        return float(np.median([np.median(r) for r in self.rounds])) if self.rounds else float("nan")


@dataclass
class RaceRecord:
    standings: list[Standing]
    stages: int
    stopped: str  # why the race stopped
    leader: str
    pick: str
    runner_up: str | None
    tie: list[str]  # the pairs within ``tie`` of the leader (race medians), the pick among them
    confirm_ratio: float | None = None  # runner-up / pick, from the confirmation
    confirm_low: float | None = None
    confirm_high: float | None = None
    confirm_medians: tuple[float, float] | None = None  # (pick, runner-up)
    swapped: bool = False
    race_rounds: int = 0  # rounds each pair still in ran, over the stages
    elapsed: float = 0.0
    stage_s: list[float] = field(default_factory=list)  # wall seconds of each stage, then the confirmation's
    budget: float = 0.0  # the seconds the race was given
    stage_rounds: int = 0  # rounds per stage, fewer than asked when the object is slow
    confirm_rounds: int = 0
    iteration_s: float = 0.0  # the slowest probe's iteration, which set those
    probes_only: bool = False  # the budget held no race: judged on one probe iteration a pair


def split_rounds(result: Result, metric: str, rounds: int) -> list[list[float]]:
    """The samples of each round, as bench_interleaved spread a case's iterations over ``rounds``."""
    samples = list(result.samples.get(metric) or result.samples[result.primary])
    n = len(samples)
    out, done = [], 0
    for r in range(rounds):
        k = n * (r + 1) // rounds - done
        if k:
            out.append(samples[done:done + k])
        done += k
    return out


def _interval(a: Standing, b: Standing, opts: RaceOptions) -> tuple[float, float, float]:
    k = min(len(a.rounds), len(b.rounds))
    iv = rounds_ratio_interval(a.rounds[:k], b.rounds[:k], opts.confidence, resamples=2000)  # side by side
    return iv.ratio, iv.low, iv.high


def affordable_rounds(rounds: int, iteration_s: float, pairs: int, seconds: float) -> tuple[int, int]:
    """(rounds, iterations a round) of ``pairs`` pairs that fit in ``seconds``: at most ``rounds`` of
    :data:`PER_ROUND`, at least 2 rounds (an interval needs two), of one iteration when even two
    rounds of :data:`PER_ROUND` would not fit."""
    if iteration_s <= 0:
        return rounds, PER_ROUND
    fit = int(seconds / (PER_ROUND * iteration_s * pairs))
    return (max(2, min(rounds, fit)), PER_ROUND if fit >= 2 else 1)


def iteration_seconds(result: Result, scenario: str) -> float:
    """Seconds one iteration of ``result`` took: its metric's slowest sample, times the messages an
    iteration holds (a stream's window; a ping-pong's two one-way trips)."""
    samples = result.samples.get(METRICS[scenario]) or result.samples[result.primary]
    per = {"stream": int(result.extra.get("window", 1)), "pingpong": 2}.get(scenario, 1)
    return max(samples) * per if samples else 0.0


def _settings(per_case: float, rounds: int, count: bool, per_round: int = PER_ROUND) -> BenchSettings:
    # one object every time, as the user sends it (no alternating seeds); at least ``per_round``
    # iterations a round; counted only when asked (the confirmation)
    return BenchSettings(time_budget=max(0.05, per_case), min_iterations=per_round * rounds, alternate=False,
                         count=count, count_repeats=COUNT_REPEATS)


def race(group: Group, specs: Sequence[BackendSpec], payload: Any, opts: RaceOptions) -> RaceRecord | None:
    """Collective: race ``specs`` on ``payload``; the record on rank 0, None elsewhere."""
    t0 = time.perf_counter()
    everyone = [f"{s.name}/{s.mode}" for s in specs]
    standing = {p: Standing(p) for p in everyone}
    alive = list(everyone)
    by_pair = dict(zip(everyone, specs))
    stage, stopped, last_stage = 0, "", 0.0
    stage_s: list[float] = []
    race_budget = opts.budget * RACE_SHARE
    # a stage may take a third of the race at most (the race then has room for an elimination)
    rounds, per_round = affordable_rounds(opts.rounds, opts.iteration_s, len(alive), race_budget / 3)
    while True:
        s0 = time.perf_counter()
        per_case = min(race_budget / 6, max(0.1, race_budget - (s0 - t0)) / 2) / len(alive)
        settings = _settings(per_case, rounds, False, per_round)
        results = bench_interleaved(group, [by_pair[p] for p in alive], payload, opts.scenario, settings,
                                    rounds=rounds)
        last_stage = time.perf_counter() - s0
        stage_s.append(last_stage)
        decision: tuple[list[str], str] | None = None
        if group.rank == 0:
            for p, res in zip(alive, results):
                assert res is not None
                standing[p].rounds.extend(split_rounds(res, opts.metric, rounds))
            decision = _judge(standing, alive, stage, opts, time.perf_counter() - t0, last_stage, race_budget)
        alive, stopped = group.bcast(decision)
        stage += 1
        if stopped:
            break
    if group.rank != 0:
        _confirm(group, by_pair, None, payload, opts, t0)
        return None
    leader, tie, pick = choose({p: standing[p].median for p in alive}, opts.tie)
    for st in standing.values():
        if st.pair != leader and st.rounds:
            st.ratio, st.low, st.high = _interval(st, standing[leader], opts)
        elif st.pair == leader:
            st.ratio = st.low = st.high = 1.0
    others = [p for p in sorted(everyone, key=lambda p: standing[p].median) if p != pick]
    runner = others[0] if others else None
    record = RaceRecord(list(standing.values()), stage, stopped, leader, pick, runner, tie,
                        race_rounds=len(standing[leader].rounds), stage_s=stage_s, budget=opts.budget,
                        stage_rounds=rounds, iteration_s=opts.iteration_s)
    return _confirm(group, by_pair, record, payload, opts, t0)


def choose(medians: dict[str, float], tie: float) -> tuple[str, list[str], str]:
    """(the leader, the pairs within ``tie`` of it, fastest first, and the pick: the simplest of those)."""
    ranked = sorted(medians, key=lambda p: medians[p])
    tied = [p for p in ranked if medians[p] <= (1 + tie) * medians[ranked[0]]]
    return ranked[0], tied, min(tied, key=lambda p: (simplicity(p), medians[p]))


def _judge(standing: dict[str, Standing], alive: list[str], stage: int, opts: RaceOptions, elapsed: float,
           last_stage: float, race_budget: float) -> tuple[list[str], str]:
    """Rank 0, after a stage: (the pairs still in, why the race stops or "")."""
    if len(alive) == 1:
        return alive, "one pair left"
    leader = min(alive, key=lambda p: standing[p].median)
    still = [leader]
    intervals = {}
    for p in alive:
        if p == leader:
            continue
        ratio, low, high = _interval(standing[p], standing[leader], opts)
        intervals[p] = (ratio, low, high)
        if low > 1 + opts.tie:
            standing[p].out_at_stage = stage
        else:
            still.append(p)
    still.sort(key=lambda p: standing[p].median)
    if len(still) == 1:
        return still, "every other pair is slower beyond the tie"
    _, low, high = intervals[still[1]]
    if low > 1:
        return still, "the leader is faster than the runner-up (interval above 1)"
    if 1 / (1 + opts.tie) <= low and high <= 1 + opts.tie:
        return still, f"the runner-up is tied with the leader (interval within {opts.tie:.0%})"
    if elapsed + last_stage * len(still) / len(alive) > race_budget:
        return still, "the budget"
    return still, ""


def _confirm(group: Group, by_pair: dict[str, BackendSpec], record: RaceRecord | None, payload: Any,
             opts: RaceOptions, t0: float) -> RaceRecord | None:
    """Collective: the pick against the runner-up, a fresh interleaved run of the two alone."""
    pairs = group.bcast([record.pick, record.runner_up] if record is not None and record.runner_up else None)
    if pairs is None:
        if record is not None:
            record.elapsed = time.perf_counter() - t0
        return record
    c0 = time.perf_counter()
    remaining = opts.budget - (c0 - t0)
    seconds = max(0.1, min(opts.budget * (1 - RACE_SHARE), remaining))
    per_case, (rounds, per_round) = group.bcast(
        (seconds / 3, affordable_rounds(opts.confirm_rounds, opts.iteration_s, 2, seconds)))
    results = bench_interleaved(group, [by_pair[p] for p in pairs], payload, opts.scenario,
                                _settings(per_case, rounds, False, per_round), rounds=rounds)
    if record is not None:
        record.stage_s.append(time.perf_counter() - c0)
    _count(group, by_pair, pairs, record, payload, opts, t0)
    if record is None:
        return None
    first, second = results[0], results[1]
    assert first is not None and second is not None  # rank 0 (the one with a record) holds the results
    record.confirm_rounds = rounds
    a = Standing(pairs[0], split_rounds(first, opts.metric, rounds))
    b = Standing(pairs[1], split_rounds(second, opts.metric, rounds))
    ratio, low, high = _interval(b, a, opts)  # runner-up / pick
    # the decision weighs every round the two ran side by side, the race's and the confirmation's;
    # the printed ratio and interval stay the confirmation's alone
    by_name = {st.pair: st for st in record.standings}
    k = min(len(by_name[pairs[0]].rounds), len(by_name[pairs[1]].rounds))
    pooled_a = Standing(pairs[0], by_name[pairs[0]].rounds[:k] + a.rounds)
    pooled_b = Standing(pairs[1], by_name[pairs[1]].rounds[:k] + b.rounds)
    if pooled_b.median * (1 + opts.tie) < pooled_a.median:  # the runner-up is faster beyond the tie: they swap
        record.pick, record.runner_up, record.swapped = pairs[1], pairs[0], True
        ratio, low, high = 1 / ratio, 1 / high, 1 / low
        a, b = b, a
    record.confirm_ratio, record.confirm_low, record.confirm_high = ratio, low, high
    record.confirm_medians = (a.median, b.median)
    record.elapsed = time.perf_counter() - t0
    return record


def count_estimate(median_s: float, nbytes: int) -> float:
    """Seconds the counting pass of the two pairs may take: their messages (harness/count.py: up to 16, by
    volume at least 2) in each repeat's message and barrier phases and in the allocation pass, each
    :data:`TRACED` times a timed message (tracing every Python call slows the allocation pass most)."""
    messages = max(2, min(COUNT_MESSAGES, COUNT_VOLUME // max(1, nbytes)))
    return 2 * messages * (2 * COUNT_REPEATS + 1) * TRACED * median_s


def _count(group: Group, by_pair: dict[str, BackendSpec], pairs: list[str], record: RaceRecord | None,
           payload: Any, opts: RaceOptions, t0: float) -> None:
    """Collective: the counting pass of the two confirmed pairs, when asked and the budget has room."""
    why = ""
    if record is not None:  # rank 0 decides
        elapsed = time.perf_counter() - t0
        medians = [st.median for st in record.standings if st.pair in pairs]
        estimate = count_estimate(max(medians), payload.size)
        if not opts.count:
            why = "counting turned off"
        elif estimate > max(opts.budget - elapsed, COUNT_SHARE * opts.budget):
            why = (f"not counted: the race and confirmation used {elapsed:.0f} s of the {opts.budget:.0f} s left "
                   f"of the budget, and counting would take about {estimate:.0f} s more (a larger --budget counts)")
    why = group.bcast(why)
    if record is not None and why:
        for st in record.standings:
            st.counting = st.counting or why
    if why:
        return
    settings = BenchSettings(time_budget=0.01, min_iterations=1, max_iterations=1, warmup=1, alternate=False,
                             count=True, count_repeats=COUNT_REPEATS)
    c0 = time.perf_counter()
    results = bench_interleaved(group, [by_pair[p] for p in pairs], payload, opts.scenario, settings, rounds=1)
    if record is None:
        return
    record.stage_s.append(time.perf_counter() - c0)
    by_name = {st.pair: st for st in record.standings}
    for p, res in zip(pairs, results):
        assert res is not None  # rank 0 (the one with a record) holds the results
        by_name[p].counters = res.counters
        by_name[p].counting = str(res.extra.get("counting", ""))
    for st in record.standings:
        if st.pair not in pairs:
            st.counting = st.counting or "counted for the pick and the runner-up only"


def race_floor(iteration_s: float, pairs: int) -> float:
    """Seconds the shortest race of ``pairs`` pairs takes at least: a warm-up and 2 rounds of one
    iteration a pair in its one stage, and the same for the two pairs of the confirmation."""
    return 3 * iteration_s * (pairs + 2)


def probes_only(seconds: dict[str, float], stopped: str, tie: float = 0.05) -> RaceRecord:
    """Rank 0: the record of a call whose budget held the probes but no race: each pair judged on its
    probe's one iteration (no interval), the pick the simplest within ``tie`` of the fastest."""
    leader, tied, pick = choose(seconds, tie)
    best = seconds[leader]
    standing = [Standing(p, [[s]], ratio=s / best if best > 0 else None, counting="not counted: the budget held no "
                         "race") for p, s in seconds.items()]
    others = sorted((p for p in seconds if p != pick), key=lambda p: seconds[p])
    return RaceRecord(standing, 0, stopped, leader, pick, others[0] if others else None, tied,
                      race_rounds=1, iteration_s=max(seconds.values()), probes_only=True)


def probe(group: Group, spec: BackendSpec, payload: Any, scenario: str) -> float:
    """Collective: the object once through ``spec`` in the scenario (opened, sent, read, verified,
    closed); raises what the backend raised. Rank 0: the seconds of its one iteration (0 elsewhere)."""
    settings = BenchSettings(time_budget=0.01, min_iterations=1, max_iterations=1, warmup=1, alternate=False,
                             count=False)
    result = bench_interleaved(group, [replace(spec)], payload, scenario, settings, rounds=1)[0]
    return iteration_seconds(result, scenario) if result is not None else 0.0
