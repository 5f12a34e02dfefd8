"""One side of a comparison made of several separate runs (``ipcbench compare BASE HEAD`` with a
folder or a glob on a side).

Two single runs of the same code can move several-fold for some cases (rules 19 and 24). Several
runs a side show that spread: they are merged as rounds (comparison/rounds.py) and compare bounds
a case's between-run noise by how far its runs moved (a t interval of the runs' log ratios,
moderated by its group's), which one jump cannot fool. That holds only when the two sides' runs
overlap in time (base, head, base, head, ...) and number at least :data:`MIN_RUNS`; otherwise
compare falls back to the rule for single runs and says why.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results.results import ResultSet
from .rounds import merge_rounds
from .verdict import GateError

#: The env key of a side merged from separate runs: each run's id and creation time, in order.
RUNS_KEY = "compared_runs"
#: Runs a side needs before their own spread bounds the noise: a machine can have states that last
#: several runs (docs/method.md rules 19 and 24), and with few runs a side all of one side may meet
#: one state and none of the other's (docs/measurements/2026-11-code-notes.md).
MIN_RUNS = 5
#: The fast-tail quantile by which compare also judges sides of several runs and a gate's rounds
#: (beside their medians, each way at half the error rate): other jobs only add time, to some
#: iterations more than to others, and reach a run's fastest iterations least (docs/method.md
#: rule 19; what it gained: docs/measurements/2026-11-compare-and-gate.md).
RUN_QUANTILE = 0.1
RESULTS_FILE = "results.json"


def side_files(spec: str, side: str) -> list[Path]:
    """The results files ``spec`` names: a file; a folder (its results.json, else the
    results.json of each folder in it, as ``ipcbench run --out DIR/1`` ... writes them); or a
    glob of either (quoted, so that the shell leaves it to us)."""
    paths = [Path(p) for p in sorted(glob.glob(spec))] if glob.has_magic(spec) else [Path(spec)]
    if not paths:
        raise GateError(f"{side}: nothing matches {spec!r}")
    files: list[Path] = []
    for path in paths:
        try:
            folder = path.is_dir() and path.suffix != ".json"
        except OSError as exc:  # a name longer than the filesystem takes, a loop of links
            raise GateError(f"{side}: cannot read {str(path)[:80]}...: {exc.strerror}") from None
        if folder:  # a folder named *.json: the loader says it is none
            own = path / RESULTS_FILE
            found = [own] if own.is_file() else sorted(path.glob(f"*/{RESULTS_FILE}"))
            if not found:
                raise GateError(f"{side}: folder {path} holds no {RESULTS_FILE} (nor do the folders in it); "
                                f"`ipcbench run --out DIR` writes DIR/{RESULTS_FILE}")
            files.extend(found)
        else:
            files.append(path)
    return files


def load_side(spec: str, side: str) -> ResultSet:
    """One side of a comparison: the one run ``spec`` names, or its runs merged as rounds (env
    :data:`RUNS_KEY` lists them). GateError naming the file for a bad one, or for a run given twice."""
    files = side_files(spec, side)
    sets = [load_results(str(f), side) for f in files]
    if len(sets) == 1:
        return sets[0]
    seen: dict[str, Path] = {}
    for f, rs in zip(files, sets):
        run_id = str(rs.env.get("run_id") or f.resolve())
        if run_id in seen:
            raise GateError(f"{side}: {f} and {seen[run_id]} are the same run (run id {run_id}): each run counts once")
        seen[run_id] = f
        if isinstance(rs.env.get("gate_rounds"), int):
            raise GateError(f"{side}: {f} is already merged from {rs.env['gate_rounds']} rounds (a gate's side): "
                            f"compare it alone, not among separate runs")
    return merge_runs(sets, [str(f) for f in files])


def merge_runs(sets: Sequence[ResultSet], names: Sequence[str] = ()) -> ResultSet:
    """Separate runs of one side merged as rounds, each run's id and creation time kept (:data:`RUNS_KEY`)."""
    merged = merge_rounds(sets)
    merged.env.pop("gate_rounds", None)  # not a gate's interleaved rounds
    merged.env[RUNS_KEY] = [{"run_id": rs.env.get("run_id"), "created": rs.env.get("created"),
                             "others_cpu_share": rs.env.get("others_cpu_share"),
                             "cross_cpu_copy_s": rs.env.get("cross_cpu_copy_s"),
                             "file": names[i] if i < len(names) else ""} for i, rs in enumerate(sets)]
    return merged


def load_results(path: str, side: str) -> ResultSet:
    """A results file for one side of a comparison; a bad one is a GateError naming it."""
    try:
        return ResultSet.load(path)
    except (ValueError, FileNotFoundError) as exc:
        raise GateError(f"{side}: {exc}") from None
    except (KeyError, TypeError) as exc:  # a results file whose records lack fields
        raise GateError(f"{side}: {path} has malformed result records ({exc})") from None


def runs_of(rs: ResultSet) -> list[dict[str, Any]]:
    """The separate runs a side was merged from (empty for one run or a gate's side)."""
    runs = rs.env.get(RUNS_KEY)
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def shared_runs(rs: ResultSet, side: str, limit: float) -> list[str]:
    """The runs of a side during which other processes took more than ``limit`` of the CPUs."""
    out = []
    for i, run in enumerate(runs_of(rs)):
        share = run.get("others_cpu_share")
        if isinstance(share, (int, float)) and share > limit:
            out.append(f"{side} run {i + 1} ({run.get('file') or run.get('run_id')}): {share:.0%}")
    return out


def overlap_problem(base: ResultSet, head: ResultSet) -> str | None:
    """Why the two sides' runs cannot bound their own noise, or None: fewer than :data:`MIN_RUNS`
    a side, a run without its creation time, or one side's runs all made before the other's."""
    a, b = runs_of(base), runs_of(head)
    if not a and not b:
        return "one run a side"
    if min(len(a), len(b)) < MIN_RUNS:
        return (f"{len(a) or 1} run(s) of base and {len(b) or 1} of head: their own spread needs at least "
                f"{MIN_RUNS} a side")
    times = [[str(r.get("created") or "") for r in side] for side in (a, b)]
    if not all(all(t) for t in times):
        return "a run without its creation time (env 'created'): whether the sides' runs alternated is unknown"
    (a0, a1), (b0, b1) = ((min(t), max(t)) for t in times)
    if a1 < b0 or b1 < a0:
        first, second = ("base", "head") if a1 < b0 else ("head", "base")
        return (f"every run of {first} was made before every run of {second}: a change of the machine between "
                f"them would read as the code's; make the runs alternately (base, head, base, ...)")
    return None
