"""Progress of ``ipcbench run`` on the terminal: rich when it is one, plain lines otherwise."""

from __future__ import annotations

import time
from typing import Any

from ..core.units import format_time
from ..report.counters import run_note
from ..results.results import Result


class Progress:
    """Progress on the terminal: rich when it is one, plain lines otherwise, or nothing."""

    def __init__(self, total: int, mode: str = "auto") -> None:
        self.total = max(total, 1)
        self.done = 0
        self.t0 = time.monotonic()
        self.mode = mode
        self._rich: Any = None
        if mode in ("auto", "rich"):
            try:
                import rich.progress as rp
                from rich.console import Console

                console = Console(stderr=False)
                if mode == "rich" or console.is_terminal:
                    self._rich = rp.Progress(
                        rp.TextColumn("[bold]{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn(),
                        rp.TextColumn("elapsed"), rp.TimeElapsedColumn(), rp.TextColumn("left ~"),
                        rp.TimeRemainingColumn(), console=console, transient=False,
                    )
                    self._task = self._rich.add_task("starting", total=self.total)
                    self._rich.start()
            except ImportError:
                self._rich = None
        if self._rich is None and mode == "auto":
            self.mode = "plain"

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60:02d}:{s % 60:02d}"

    def start(self, label: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=label[:70])

    def finish(self, label: str, note: str = "", ok: bool = True) -> None:
        self.done += 1
        mark = "ok  " if ok else "FAIL"
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
        self.note(f"[{self.done}/{self.total} {self._elapsed()}] {mark} {label}" + (f"  {note}" if note else ""))

    def note(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        elif self.mode != "none":
            print(text, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def summary_note(r: Result) -> str:
    summary, eff = r.summary(), r.efficiency()
    extra = f", {eff:.0%} of copy bw" if eff is not None and r.scenario == "broadcast" else ""
    note = f"{r.primary} {format_time(summary.median)} (n={summary.n}{extra})"
    counted = run_note(r)  # the exact counters per message (report/counters.py)
    return f"{note}; per message: {counted}" if counted else note
