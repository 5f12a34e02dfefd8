"""What compare warns about beside its verdicts: runs of different machines, loads or
calibrations, and how the between-run noise of files of different runs was taken."""

from __future__ import annotations

import math

from ..core.units import format_time
from ..results.results import ResultSet
from .calibration import UNCALIBRATED_NOISE, Calibration
from .normalise import Normalisation
from .run_sets import runs_of
from .verdict import LOAD_GAP


def load_of(rs: ResultSet) -> float | None:
    """The 1-minute load a run (or a side's runs, on average) met: the mean of its start and end."""
    xs = [float(x) for k in ("load_start", "load_end") if isinstance(x := rs.env.get(k), (int, float))]
    return sum(xs) / len(xs) if xs else None


def load_warning(base: ResultSet, head: ResultSet) -> str | None:
    """A warning when base and head met clearly different loads."""
    a, b = load_of(base), load_of(head)
    if a is None or b is None:
        return None
    if abs(a - b) > max(LOAD_GAP, 0.25 * max(a, b)):
        cores = base.env.get("cores") or head.env.get("cores")
        on = f" on {cores} cores" if cores else ""
        return (
            f"the machine's load differed between the runs (1-minute load average: base {a:.1f}, head {b:.1f}{on}): "
            f"the in-run references divide out a uniform slow-down, not one that hits some cases more"
        )
    return None


#: the spread of the runs' cross-CPU copies (core/cpu_pair.py) past which compare says the host's
#: state changed between them (docs/method.md rule 24)
HOST_STATE_GAP = 1.3


def _apart(copies: list[float]) -> bool:
    """Did these cross-CPU copies meet the host in different states (past :data:`HOST_STATE_GAP`)?"""
    return len(copies) > 1 and max(copies) > HOST_STATE_GAP * min(copies)


def cross_cpu_copies(rs: ResultSet) -> list[float]:
    """The 1 MiB copies from another CPU's cache a side's runs measured (each run's start and end)."""
    records = [run.get("cross_cpu_copy_s") for run in runs_of(rs)] or [rs.env.get("cross_cpu_copy_s")]
    return [float(x) for xs in records if isinstance(xs, list) for x in xs if isinstance(x, (int, float)) and x > 0]


def host_state_warning(base: ResultSet, head: ResultSet) -> str | None:
    """A warning when the runs met the host in different states: a copy between two CPUs at clearly
    different speeds (a virtual machine's CPUs placed near or far apart by its host)."""
    a, b = cross_cpu_copies(base), cross_cpu_copies(head)
    if not a or not b or not _apart(a + b):
        return None

    def span(xs: list[float]) -> str:
        lo, hi = min(xs), max(xs)
        return format_time(lo) if hi < 1.05 * lo else f"{format_time(lo)} to {format_time(hi)}"

    return (f"the host moved data between this machine's CPUs at different speeds during these runs (a 1 MiB copy "
            f"from another CPU's cache: base {span(a)}, head {span(b)}; measured at each run's start and end): cases "
            f"whose data crosses CPUs move with it, whatever the code; compare runs whose copies agree, or use the "
            f"gate, whose rounds alternate")



def host_state_change(copies: list[float | None]) -> str | None:
    """What a run says when the host's state changed between its start and its end."""
    xs = [x for x in copies if x]
    if not _apart(xs):
        return None
    return (f"the host's state changed during this run (a 1 MiB copy from another CPU's cache: "
            f"{format_time(xs[0])} at the start, {format_time(xs[-1])} at the end): cases whose data crosses CPUs "
            f"may have met either")


def calibration_warning(calibration: Calibration | None, base: ResultSet, head: ResultSet) -> str | None:
    """A calibration made on another machine (other cores or host) is ignored, with this warning."""
    if calibration is None:
        return None
    for key in ("cores", "host"):
        cal = calibration.env.get(key)
        ours = head.env.get(key) or base.env.get(key)
        if cal is not None and ours is not None and str(cal) != str(ours):
            return (f"the calibration {calibration.path or ''} was made with {key} {cal!r}, these runs with "
                    f"{ours!r}: it is ignored (calibrate on this runner with `ipcbench calibrate`)")
    return None


def calibration_load_note(calibration: Calibration | None, base: ResultSet, head: ResultSet) -> str | None:
    """A warning when the runs met a load well outside the one the calibration was measured at."""
    if calibration is None:
        return None
    load = calibration.env.get("load")
    ours = [x for x in (load_of(base), load_of(head)) if x is not None]
    if not (isinstance(load, list) and len(load) == 2 and ours):
        return None
    lo, hi = float(load[0]), float(load[1])
    outside = [x for x in ours if x < lo / 1.5 - 0.5 or x > hi * 1.5 + 0.5]
    if not outside:
        return None
    return (f"the runs met a load of {', '.join(f'{x:.1f}' for x in ours)}, the calibration was measured at "
            f"{lo:.1f}-{hi:.1f}: the noise of a case can differ between loads (some cases switch between two "
            f"speeds); calibrate at the load the runs meet")


def across_runs_note(norm: Normalisation | None, calibration: Calibration | None, spread: float,
                      runs: tuple[int, int] | None = None) -> str:
    how = "not normalised (--paired)" if norm is None else norm.describe()
    if runs is not None:
        floor = f", at least the noise measured by the {calibration.describe()}" if calibration is not None else ""
        noise = (f"base holds {runs[0]} runs and head {runs[1]}, made alternately: a case's between-run noise is how "
                 f"far its runs moved (a t interval of their log ratios, moderated by its group's){floor}")
    elif calibration is not None:
        noise = f"the between-run noise of each case is the one measured by the {calibration.describe()}"
    else:
        noise = (f"no calibration: the between-run noise of the cases was not measured, so no case is decided "
                 f"(every one is inconclusive; 'looks slower' / 'looks faster' in its notes, its interval assuming "
                 f"±{math.exp(max(UNCALIBRATED_NOISE, spread)) - 1:.0%} (1 sd, log scale), the larger of "
                 f"±{math.exp(UNCALIBRATED_NOISE) - 1:.0%} and the cases' own spread around their median ratio); "
                 f"`ipcbench calibrate` measures the noise on this runner, then compare decides")
    return f"base and head come from different runs (not one interleaved experiment): {how}; {noise}"


def env_warnings(base: ResultSet, head: ResultSet) -> list[str]:
    """Differences of environment that make a ratio mean something else than the code's change."""
    warnings = []
    for key in ("host", "hostname", "cpu", "cores", "python", "mpi"):
        a, b = base.env.get(key), head.env.get(key)
        if a is not None and b is not None and a != b:
            shown = f"{str(a)[:60]!r} vs {str(b)[:60]!r}"
            warnings.append(f"base and head differ in {key} ({shown}): the ratio includes that difference")
    return warnings
