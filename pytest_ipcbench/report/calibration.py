"""The plot of ``ipcbench calibrate``: each case's A/A noise by group, and what a verdict can detect."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..comparison.calibration import Calibration
from ..comparison.calibration_summary import GroupSummary
from ..core.outdir import atomic_output


def plot_calibration(calibration: Calibration, summaries: Sequence[GroupSummary], rounds: int,
                     path: Path) -> Path | None:
    """Left: every case's between-run noise (1 sd of head / base of identical code), one row per
    group; right: the smallest slowdown compare (two runs) and the gate (``rounds`` rounds per
    side) can call, per group. None without matplotlib or cases."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    if not calibration.cases or not summaries:
        return None
    groups = [s.group for s in summaries]
    fig = Figure(figsize=(11, 1.8 + 0.45 * len(groups)))
    noise_ax, detect_ax = fig.subplots(1, 2, sharey=True)
    for row, group in enumerate(groups):
        sigmas = [math.exp(c.sigma) - 1 for c in calibration.cases.values() if c.group == group]
        noise_ax.scatter([100 * s for s in sigmas], [row] * len(sigmas), s=14, alpha=0.6, color="tab:blue")
    noise_ax.set_yticks(range(len(groups)), groups)
    noise_ax.invert_yaxis()
    noise_ax.set_xscale("symlog", linthresh=1)
    noise_ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}%")
    noise_ax.set_xlabel("A/A noise of each case, 1 sd")
    noise_ax.grid(axis="x", alpha=0.3)
    y = list(range(len(groups)))
    runs = [s.detect_runs for s in summaries]
    gate = [s.detect_gate for s in summaries]
    detect_ax.barh([v - 0.2 for v in y], [max(r, 1.0) for r in runs], height=0.4, label="compare, 2 runs",
                   color="tab:orange", left=0)
    detect_ax.barh([v + 0.2 for v in y], [max(g, 1.0) for g in gate], height=0.4,
                   label=f"gate, up to {rounds} rounds a side", color="tab:green", left=0)
    detect_ax.set_xscale("log")
    top = max(2.5, 1.3 * max(runs + gate))
    detect_ax.set_xlim(1.0, top)
    detect_ax.set_xticks([t for t in (1, 1.25, 1.5, 2, 3, 5, 10, 30, 100, 1000) if t <= top])
    detect_ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}x")
    detect_ax.xaxis.set_minor_formatter(lambda v, _: "")
    detect_ax.axvline(1.5, color="grey", linestyle="--", linewidth=1)
    detect_ax.axvline(2.0, color="grey", linestyle=":", linewidth=1)
    detect_ax.set_xlabel("smallest slowdown it can call (median case of the group)")
    fig.legend(*detect_ax.get_legend_handles_labels(), loc="lower right", ncol=2, fontsize="small")
    detect_ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{calibration.describe()}"[:140], fontsize="small")
    fig.tight_layout(rect=(0, 0.08 + 0.3 / len(groups), 1, 1))
    FigureCanvasAgg(fig)
    with atomic_output(path, "--plot") as tmp:  # a full disk: no half image, an error naming it
        fig.savefig(tmp, dpi=100)
    return path
