"""Score ``advise`` against a longer interleaved measurement of every eligible pair.

For each case of the public generator (pytest_ipcbench/advice/cases.py), stratified by family:

1. ``advise(obj, readers, scenario, budget)``: its pick, runner-up, printed interval, per-call time;
2. the **evaluation**: every pair that could send the object, interleaved in one harness run with
   twice the rounds of advise's race and at least 24 (``--eval-rounds`` sets them), 6 iterations a
   round as far as 2 timed seconds a pair allow (``--eval-seconds``);
   each pair's median of round medians, the best, the 5% tie set (pairs within 5% of the best),
   whether the tie set is resolved (no pair's interval against the best straddles 1.05);
3. hit (the pick in the tie set), regret (t_pick / t_best - 1), coverage (advise's confirmation
   interval holds the evaluation's ratio of the same two pairs), the prior's pick alone (what
   ``--describe`` would say) and mp.Queue as users use it (mp-queue/native: the queue pickles).

One JSON line per case goes to ``--out``; ``--summary`` prints the table per family (and the best
single fixed pair's regret) from such a file; ``--repeat K`` reruns advise K more times on every
``--repeat-every``'th case (repeatability: the repeated picks in the evaluation's tie set); ``--fit`` writes the prior's table
(advice/prior.json) from a file: per bucket, the pairs by mean rank in the evaluation.

    python tools/advise_eval.py --cases 48 --budget 40 --max-bytes 16MiB --repeat 1 --check-counts --out advise-eval.jsonl
    python tools/advise_eval.py --summary advise-eval.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from pytest_ipcbench.advice import advise, features
from pytest_ipcbench.advice.cases import FAMILIES, cases
from pytest_ipcbench.advice.decision import counts_of
from pytest_ipcbench.advice.features import Features
from pytest_ipcbench.advice.payload import ObjectPayload
from pytest_ipcbench.advice.prior import SHORTLIST, TABLE_FILE, bucket, ranked
from pytest_ipcbench.advice.race import COUNT_REPEATS, METRICS, PER_ROUND, Standing, split_rounds
from pytest_ipcbench.backends.base import BackendSpec
from pytest_ipcbench.core.local import LocalWorld
from pytest_ipcbench.core.units import parse_size
from pytest_ipcbench.harness.measure import bench_interleaved
from pytest_ipcbench.harness.plan import BenchSettings
from pytest_ipcbench.results.stats import rounds_ratio_interval

TIE = 0.05
MIN_EVAL_ROUNDS = 24
BASELINE = "mp-queue/native"


def _measure(group: Any, specs: list[BackendSpec], payload: ObjectPayload, scenario: str, rounds: int,
             per_case: float, per_round: int) -> list[Any]:
    settings = BenchSettings(time_budget=per_case, min_iterations=rounds * per_round, alternate=False, count=False)
    return bench_interleaved(group, specs, payload, scenario, settings, rounds=rounds)


def _count(group: Any, spec: BackendSpec, payload: ObjectPayload, scenario: str) -> Any:
    settings = BenchSettings(time_budget=0.01, min_iterations=1, max_iterations=1, warmup=1, alternate=False,
                             count=True, count_repeats=COUNT_REPEATS)
    return bench_interleaved(group, [spec], payload, scenario, settings, rounds=1)[0]


def counts_agree(quoted: dict[str, Any], again: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(exact counters compared, equal, the differing ones): counters exact in both runs."""
    compared = equal = 0
    differ = []
    for role, values in quoted.items():
        other = again.get(role, {})
        for name, exact in values.get("exact", {}).items():
            if exact and other.get("exact", {}).get(name):
                compared += 1
                if values[name] == other[name]:
                    equal += 1
                else:
                    differ.append(f"{role} {name} {values[name]} vs {other[name]}")
    return compared, equal, differ


def evaluate(case: Any, budget: float, eval_rounds: int | None, per_case: float, repeat: int,
             check_counts: bool = False) -> dict[str, Any]:
    obj = case.build()
    f = features(obj)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    adv = advise(obj, readers=case.readers, scenario=case.scenario, budget=budget, label=case.family)
    call_s = time.perf_counter() - t0
    eligible = [c.pair for c in adv.candidates if c.status not in ("failed", "unavailable")]
    # at least twice the rounds each pair still in ran in the race, and enough rounds that the
    # evaluation's own intervals can place pairs against the 5% tie
    rounds = eval_rounds or max(MIN_EVAL_ROUNDS, 2 * adv.race["rounds"])
    # iterations a round: twice the race's, as far as the seconds a pair allow (the size rules of
    # the harness alone stop a pair of a 1 MB object at about 100 messages)
    per_round = max(1, min(2 * PER_ROUND, int(per_case / (rounds * max(adv.race.get("iteration_s", 0), 1e-6)))))
    ranks = 2 if case.scenario == "pingpong" else case.readers + 1
    payload = ObjectPayload(obj, f.total_bytes, f.oob_bytes or f.total_bytes, case.family)
    specs = [BackendSpec(*p.split("/")) for p in eligible]
    t1 = time.perf_counter()
    with LocalWorld(ranks) as world:
        results = world.run(_measure, specs, payload, case.scenario, rounds, per_case, per_round, ranks=ranks)[0]
        eval_s = time.perf_counter() - t1
        quoted = adv.candidate(adv.pick).counts
        recount = None
        if check_counts and quoted:
            again = counts_of(world.run(_count, BackendSpec(*adv.pick.split("/")), payload, case.scenario,
                                        ranks=ranks)[0].counters)
            recount = counts_agree(quoted, again)
    repeats = [advise(obj, readers=case.readers, scenario=case.scenario, budget=budget).pick for _ in range(repeat)]
    st = {p: Standing(p, split_rounds(r, METRICS[case.scenario], rounds)) for p, r in zip(eligible, results)}
    med = {p: s.median for p, s in st.items()}
    best = min(med, key=med.get)
    tie = sorted(p for p in med if med[p] <= (1 + TIE) * med[best])
    unresolved = []
    for p in med:
        if p == best:
            continue
        iv = rounds_ratio_interval(st[p].rounds, st[best].rounds, 0.95, resamples=2000)
        if iv.low < 1 + TIE < iv.high:
            unresolved.append(p)
    eval_ratio = None
    covered = None
    if adv.runner_up and adv.runner_up in med and adv.low is not None:
        eval_ratio = med[adv.runner_up] / med[adv.pick]
        covered = adv.low <= eval_ratio <= adv.high
    prior_pick = ranked(f, eligible)[0]
    return {
        "case": case.id, "family": case.family, "size": case.size, "readers": case.readers,
        "scenario": case.scenario, "bytes": f.total_bytes, "bucket": bucket(f), "features": f.to_dict(),
        "pick": adv.pick, "runner_up": adv.runner_up, "ratio": adv.ratio, "low": adv.low, "high": adv.high,
        "advise_tie": adv.tie, "shortlist": adv.prior["shortlist"], "failed": [c.pair for c in adv.candidates if c.status == "failed"],
        "stopped": adv.race["stopped"], "advise_rounds": adv.race["rounds"], "eval_rounds": rounds,
        "medians": med, "best": best, "tie": tie, "unresolved": unresolved,
        "hit": adv.pick in tie, "regret": med[adv.pick] / med[best] - 1,
        "prior_pick": prior_pick, "prior_hit": prior_pick in tie, "prior_regret": med[prior_pick] / med[best] - 1,
        "baseline_regret": (med[BASELINE] / med[best] - 1) if BASELINE in med else None,
        "eval_ratio": eval_ratio, "covered": covered, "repeats": repeats, "recount": recount,
        "counted": bool(adv.candidate(adv.pick).counts),
        "repeat_hits": sum(p in tie for p in repeats), "call_s": call_s, "eval_s": eval_s,
        "eval_seconds": per_case, "eval_per_round": per_round, "pairs": len(eligible),
        "load_start": load0, "load_end": os.getloadavg()[0],
    }


def _pct(x: list[float], q: float) -> float:
    return float(np.quantile(x, q)) if x else float("nan")


def summary(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return "no cases"
    out = ["| family | cases | hits | mean regret | p95 | max | prior hits | mp-queue/native mean regret | coverage | pick unresolved | call s (min, median, max) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["family"]].append(r)
        groups[f"readers={r['readers']}"].append(r)
        groups[f"scenario={r['scenario']}"].append(r)
    for name in [*FAMILIES, *sorted(k for k in groups if "=" in k), "all"]:
        g = rows if name == "all" else groups.get(name, [])
        if not g:
            continue
        reg = [r["regret"] for r in g]
        base = [r["baseline_regret"] for r in g if r["baseline_regret"] is not None]
        cov = [r["covered"] for r in g if r["covered"] is not None]
        calls = [r["call_s"] for r in g]
        out.append(f"| {name} | {len(g)} | {sum(r['hit'] for r in g)} | {np.mean(reg):.1%} | {_pct(reg, .95):.1%} | "
                   f"{max(reg):.1%} | {sum(r['prior_hit'] for r in g)} | "
                   f"{(np.mean(base) if base else float('nan')):.1%} | {sum(cov)}/{len(cov)} | "
                   f"{sum(r['pick'] in r['unresolved'] for r in g)} | {np.min(calls):.0f}, {np.median(calls):.0f}, "
                   f"{max(calls):.0f} |")
    # the best single fixed pair, over the cases every built-in pair can run (a store cannot stream):
    # the pair with the smallest mean regret there, beside advise's and mp.Queue's on the same cases
    fixed: dict[str, list[float]] = defaultdict(list)
    common = [r for r in rows if r["scenario"] != "stream"]
    for r in common:
        best = min(r["medians"].values())
        for p, m in r["medians"].items():
            fixed[p].append(m / best - 1)
    pool = {p: v for p, v in fixed.items() if len(v) == len(common)}
    out.append("")
    if pool:
        p_best = min(pool, key=lambda p: np.mean(pool[p]))
        base = [r["baseline_regret"] for r in common if r["baseline_regret"] is not None]
        out.append(f"best single fixed pair over the {len(common)} broadcast and ping-pong cases: {p_best}, mean regret "
                   f"{np.mean(pool[p_best]):.1%}, max {max(pool[p_best]):.1%}; advise there: mean "
                   f"{np.mean([r['regret'] for r in common]):.1%}, max {max(r['regret'] for r in common):.1%}; "
                   f"mp-queue/native there: mean {np.mean(base):.1%}")
    any_unresolved = sum(bool(r["unresolved"]) for r in rows)
    out.append(f"cases where some pair's interval against the best straddles 1.05: {any_unresolved} of {len(rows)}; "
               f"where the pick's does: {sum(r['pick'] in r['unresolved'] for r in rows)}")
    reps = [r for r in rows if r["repeats"]]
    rec = [r["recount"] for r in rows if r.get("recount")]
    if rec:
        out.append(f"counters: the pick's exact counters counted again in a run of their own: "
                   f"{sum(r[1] for r in rec)} of {sum(r[0] for r in rec)} equal over {len(rec)} cases"
                   + (f"; differing: {'; '.join(d for r in rec for d in r[2][:3])}" if any(r[2] for r in rec) else ""))
    counted = [r for r in rows if "counted" in r]
    if counted:
        out.append(f"advise counted the pick in {sum(r['counted'] for r in counted)} of {len(counted)} cases "
                   "(the rest: the budget was spent before the counting pass)")
    if reps:
        out.append(f"repeatability: {sum(r['repeat_hits'] for r in reps)} of {sum(len(r['repeats']) for r in reps)} "
                   f"repeated advises in the evaluation's tie set")
    loads = [r["load_start"] for r in rows] + [r["load_end"] for r in rows]
    out.append(f"load (1-min) during the evaluation: {min(loads):.1f}-{max(loads):.1f}")
    out.append(f"picks >= 1.5x the best: {sum(r['regret'] >= 0.5 for r in rows)}")
    return "\n".join(out)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _table(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per bucket, the pairs by their mean rank in the evaluation's full measurement."""
    ranks: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        order = sorted(r["medians"], key=r["medians"].get)
        for i, p in enumerate(order):
            ranks[r["bucket"]][p].append(i)
    return {b: sorted(d, key=lambda p: (np.mean(d[p]), p)) for b, d in ranks.items()}


def fit(path: Path) -> dict[str, Any]:
    rows = _rows(path)
    table = _table(rows)
    return {"source": f"tools/advise_eval.py --fit {path.name}: {len(rows)} cases of advice/cases.py, "
                      "pairs by mean rank per bucket in the full interleaved measurement",
            "cases": len(rows), "rows": table}


def fit_check(path: Path) -> str:
    """Would a fitted prior shortlist better? Each case against a table fitted on the others
    (leave one out) and against the default order: cases whose shortlist holds a pair of the
    evaluation's tie set, and whose first pair (``--describe``'s pick) is in it; and the race's tie
    rule re-scored from the recorded intervals."""
    rows = _rows(path)
    held = {"fitted": [0, 0], "default": [0, 0]}
    for i, r in enumerate(rows):
        f = Features.from_dict(r["features"])
        for name, table in (("fitted", _table(rows[:i] + rows[i + 1:])), ("default", {})):
            order = ranked(f, list(r["medians"]), table)
            held[name][0] += bool(set(order[:SHORTLIST]) & set(r["tie"]))
            held[name][1] += order[0] in r["tie"]
    # the tie rule re-scored: the race's median leader (the runner-up when it led) instead of the
    # simpler pair within 5%, unless the recorded interval places the pick within 5% of it
    leader = sum((r["runner_up"] if r.get("ratio") is not None and r["ratio"] < 1 and r["runner_up"]
                  and not (r["low"] >= 1 / 1.05 and r["high"] <= 1.05) else r["pick"]) in r["tie"] for r in rows)
    return "\n".join([f"{name} prior: shortlist of {SHORTLIST} holds a tied pair in {a} of {len(rows)}, "
                      f"its first pair is tied in {b} of {len(rows)}" for name, (a, b) in held.items()]
                     + [f"picks in the tie set: {sum(r['hit'] for r in rows)} of {len(rows)} as recorded, "
                        f"{leader} with the median leader unless an interval places the simpler pair within 5%"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=36)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-bytes", default="64MiB")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--eval-rounds", type=int, default=None)
    ap.add_argument("--eval-seconds", type=float, default=2.0, help="timed seconds per pair in the evaluation")
    ap.add_argument("--repeat", type=int, default=0, help="more advises on every --repeat-every'th case (repeatability)")
    ap.add_argument("--repeat-every", type=int, default=3, metavar="N")
    ap.add_argument("--check-counts", action="store_true",
                    help="on every third case (the second of three), count the pick again in a run of its own")
    ap.add_argument("--families", default=None)
    ap.add_argument("--skip", type=int, default=0, help="start at this case (resume)")
    ap.add_argument("--out", default="advise-eval.jsonl")
    ap.add_argument("--summary", metavar="FILE")
    ap.add_argument("--fit", metavar="FILE")
    ap.add_argument("--fit-check", metavar="FILE", help="a fitted prior against the default, each case left out of its fit")
    ap.add_argument("--fit-out", metavar="PATH", default=str(TABLE_FILE),
                    help="where --fit writes the table (default: the one advise reads, advice/prior.json)")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(Path(args.summary)))
        return 0
    if args.fit_check:
        print(fit_check(Path(args.fit_check)))
        return 0
    if args.fit:
        table = fit(Path(args.fit))
        Path(args.fit_out).write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {args.fit_out}: {len(table['rows'])} buckets from {table['cases']} cases")
        return 0
    fams = args.families.split(",") if args.families else None
    todo = cases(args.cases, args.seed, parse_size(args.max_bytes), fams)[args.skip:]
    with open(args.out, "a") as out:
        for i, case in enumerate(todo, start=args.skip):
            try:
                rec = evaluate(case, args.budget, args.eval_rounds, args.eval_seconds, args.repeat if i % args.repeat_every == 0 else 0,
                               args.check_counts and i % 3 == 1)
            except Exception as exc:  # a case that cannot run is said, and the next one runs
                print(f"{case.id}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                continue
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"{case.id}: pick {rec['pick']} best {rec['best']} hit {rec['hit']} regret {rec['regret']:.1%} "
                  f"call {rec['call_s']:.0f}s eval {rec['eval_s']:.0f}s load {rec['load_start']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
