"""The watchdog moved to :mod:`pytest_ipcbench.core.watchdog` (``ipcbench run`` uses it too);
this module keeps the old import path working."""

from ..core.watchdog import (  # noqa: F401
    EXIT_CODE, HARD_EXIT_AFTER_S, INTERRUPT_GRACE_S, INTERRUPTED_EXIT_CODE, MAX_WAIT_S, Watchdog,
)

__all__ = ["EXIT_CODE", "HARD_EXIT_AFTER_S", "INTERRUPT_GRACE_S", "INTERRUPTED_EXIT_CODE", "MAX_WAIT_S", "Watchdog"]
